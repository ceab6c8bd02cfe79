/* Nothing to call: this target only puts an empty ICU data package on the link line (see icu-no-data.c). */
#ifndef CICUNODATA_H
#define CICUNODATA_H
#endif
