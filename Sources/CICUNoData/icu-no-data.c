/*
 * An empty ICU data package, linked into the release binaries in place of the 32 MiB one that comes with
 * Foundation's static ICU (lib_FoundationICU.a, member icu_packaged_data.cpp.o, symbol icudt<version>_dat).
 *
 * Why: bgtask never asks ICU for locale data — no DateFormatter, Calendar, TimeZone, Locale, collation or
 * NumberFormatter anywhere in its code or in what it calls of TOMLKit and GRDB (docs/benchmarks.md, "Lean").
 * ICU's own "stubdata" build exists for the same reason. With this object on the link line first, the linker
 * has the symbol already and never pulls the archive member; ICU calls that would need data then fail with
 * U_MISSING_RESOURCE_ERROR instead of reading it.
 *
 * The layout is ICU's common-data header (udata's MappedData + UDataInfo, 32 bytes) and a table of contents
 * ("ToCP", format 1) with no entries. BGTASK_ICU_VERSION must match the toolchain's ICU major version; if it
 * does not, nothing breaks — the symbol is simply unused and the full data is linked as before.
 */
#include <stdint.h>

#ifndef BGTASK_ICU_VERSION
#define BGTASK_ICU_VERSION 76
#endif
#define BGT_CAT2(a, b, c) a##b##c
#define BGT_CAT(a, b, c) BGT_CAT2(a, b, c)

struct bgt_icu_empty_package {
    uint16_t header_size;      /* 32: the bytes before the table of contents */
    uint8_t magic1, magic2;    /* 0xda, 0x27 */
    struct {
        uint16_t size;         /* sizeof this struct: 20 */
        uint16_t reserved;
        uint8_t is_big_endian, charset_family, sizeof_uchar, reserved_byte;
        uint8_t data_format[4];    /* "ToCP": a table of contents of packaged items */
        uint8_t format_version[4];
        uint8_t data_version[4];
    } info;
    uint8_t padding[8];
    uint32_t count;            /* no items */
    uint32_t reserved;
    uint32_t toc[4];           /* one empty entry, as ICU's stub has, for readers that peek */
};

__attribute__((used, visibility("default")))
const struct bgt_icu_empty_package BGT_CAT(icudt, BGTASK_ICU_VERSION, _dat) = {
    32, 0xda, 0x27,
    { 20, 0,
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
      1,
#else
      0,
#endif
      0 /* ASCII family */, 2 /* UChar is UTF-16 */, 0,
      { 0x54, 0x6f, 0x43, 0x50 }, { 1, 0, 0, 0 }, { 0, 0, 0, 0 } },
    { 0 }, 0, 0, { 0 },
};
