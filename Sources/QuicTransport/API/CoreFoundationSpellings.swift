#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import Dispatch

// Core Foundation's names as Security's calls use them on Apple platforms. Linux's Foundation has
// no CFData, CFArray or CFDictionary and no toll-free bridging, so each name stands for the Swift
// type apps bridge it to: `data as CFData`, `[kSecImportExportPassphrase as String: "pw"] as
// CFDictionary`, `items as! [[String: Any]]` and `chain as? [SecCertificate]` compile as they are.
// What does not: the `CFArrayGetCount`-style C functions, and passing an `NSDictionary` or
// `NSArray` where Security takes a `CFDictionary` or `CFArray`.

/// Core Foundation's data type: here Foundation's `Data`, which apps bridge it to.
public typealias CFData = Data

/// Core Foundation's array type: here `[Any]`, so `as! [[String: Any]]` and
/// `as? [SecCertificate]` cast it as on Apple platforms.
public typealias CFArray = [Any]

/// Core Foundation's dictionary type: here `[String: Any]`, which a dictionary literal with
/// `kSec…` keys converts to with `as CFDictionary`.
public typealias CFDictionary = [String: Any]

/// Core Foundation's string type: here `String`, so `kSecImportItemIdentity as String` works.
public typealias CFString = String

/// Core Foundation's allocator. Linux has none to choose: pass `nil` or `kCFAllocatorDefault`,
/// its only values.
public enum CFAllocator: Sendable {}

/// The default allocator, as apps pass it to `SecCertificateCreateWithData`; always nil here.
public let kCFAllocatorDefault: CFAllocator? = nil

/// Security's result code (`OSStatus`): 0 is success, negative values are errors.
public typealias OSStatus = Int32

/// Dispatch data as Security's C calls take it (`dispatch_data_t`): here `DispatchData`.
public typealias dispatch_data_t = DispatchData

/// The name Apple platforms import `dispatch_data_t` under, so `data as __DispatchData` compiles.
public typealias __DispatchData = DispatchData
