import CSdBus

/// The sd-bus calls the front makes, from libsystemd opened when a submit is about to be sent: the commands handed
/// to the full CLI (every other one) start without loading libsystemd and the five libraries it needs.
struct SdBus {
    typealias Bus = OpaquePointer
    typealias Message = OpaquePointer
    typealias OpenUser = @convention(c) (UnsafeMutablePointer<Bus?>?) -> Int32
    typealias NewMethodCall = @convention(c) (Bus?, UnsafeMutablePointer<Message?>?, UnsafePointer<CChar>?, UnsafePointer<CChar>?,
                                              UnsafePointer<CChar>?, UnsafePointer<CChar>?) -> Int32
    typealias OpenContainer = @convention(c) (Message?, CChar, UnsafePointer<CChar>?) -> Int32
    typealias CloseContainer = @convention(c) (Message?) -> Int32
    typealias AppendBasic = @convention(c) (Message?, CChar, UnsafeRawPointer?) -> Int32
    typealias Call = @convention(c) (Bus?, Message?, UInt64, UnsafeMutablePointer<sd_bus_error>?, UnsafeMutablePointer<Message?>?) -> Int32
    typealias ReadBasic = @convention(c) (Message?, CChar, UnsafeMutableRawPointer?) -> Int32

    let openUser: OpenUser
    let newMethodCall: NewMethodCall
    let openContainer: OpenContainer
    let closeContainer: CloseContainer
    let appendBasic: AppendBasic
    let call: Call
    let readBasic: ReadBasic

    /// nil when libsystemd or one of its calls is not there (the full CLI then does the submit).
    init?() {
        guard let lib = dlopen("libsystemd.so.0", RTLD_NOW | RTLD_LOCAL) else { return nil }
        func symbol<T>(_ name: StaticString, _ type: T.Type) -> T? {
            guard let p = dlsym(lib, SubmitWords.c(name)) else { return nil }
            return unsafeBitCast(p, to: type)
        }
        guard let a = symbol("sd_bus_open_user", OpenUser.self),
              let b = symbol("sd_bus_message_new_method_call", NewMethodCall.self),
              let c = symbol("sd_bus_message_open_container", OpenContainer.self),
              let d = symbol("sd_bus_message_close_container", CloseContainer.self),
              let e = symbol("sd_bus_message_append_basic", AppendBasic.self),
              let f = symbol("sd_bus_call", Call.self),
              let g = symbol("sd_bus_message_read_basic", ReadBasic.self) else { return nil }
        openUser = a; newMethodCall = b; openContainer = c; closeContainer = d; appendBasic = e; call = f; readBasic = g
    }
}
