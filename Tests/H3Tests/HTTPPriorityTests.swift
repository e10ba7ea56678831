import H3
import Testing

@Suite("HTTPPriority")
struct HTTPPriorityTests {
    @Test func defaultIsUrgencyThreeNotIncremental() {
        #expect(HTTPPriority.default.urgency == 3)
        #expect(!HTTPPriority.default.incremental)
        #expect(HTTPPriority.default.fieldValue == "u=3")
    }

    @Test(arguments: [
        ("u=5", 5, false), ("u=0, i", 0, true), ("i", 3, true), ("i=?0, u=7", 7, false), ("u=1,i", 1, true),
        ("  u=2 ", 2, false),
        // Invalid members are ignored (RFC 9218 §4), the rest still applies.
        ("u=9, i", 3, true), ("u=-1", 3, false), ("u=2.5", 3, false), ("u=\"1\"", 3, false), ("i=1, u=4", 4, false),
        ("u=4, x=abc, i", 4, true), ("u=6;p=1", 6, false),
        // A value that does not parse at all gives the default.
        ("u=", 3, false), ("!!", 3, false), ("", 3, false), ("u=1 u=2", 3, false),
    ])
    func parsing(text: String, urgency: Int, incremental: Bool) {
        let priority = HTTPPriority(fieldValue: text)
        #expect(priority.urgency == urgency, "\(text)")
        #expect(priority.incremental == incremental, "\(text)")
    }

    @Test func serializationRoundTrips() {
        for urgency in 0...7 {
            for incremental in [false, true] {
                let priority = HTTPPriority(urgency: urgency, incremental: incremental)
                #expect(HTTPPriority(fieldValue: priority.fieldValue) == priority)
            }
        }
        #expect(HTTPPriority(urgency: 0, incremental: true).fieldValue == "u=0, i")
        #expect(HTTPPriority(urgency: 12).urgency == 7)
    }
}
