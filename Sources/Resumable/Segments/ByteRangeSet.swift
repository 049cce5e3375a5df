/// A set of byte positions, kept as sorted, disjoint, non-adjacent half-open ranges.
///
/// Which bytes of a temporary file are known to hold the representation: the prefix and the segments a
/// multi-connection download finished. Pure value; every operation keeps the ranges normalized.
struct ByteRangeSet: Hashable, Sendable {
    /// The ranges, sorted, non-empty, neither overlapping nor touching.
    private(set) var ranges: [Range<Int64>] = []

    init() {}

    /// The set of the given ranges (in any order, overlapping or not; empty ones are ignored).
    ///
    /// Sorted once and merged in one pass: O(n log n), and O(n) for ranges already in order (a token's, the ranges
    /// after a prefix). One ``insert(_:)`` per range cost O(n²), and a token may list thousands of ranges.
    init(_ ranges: some Sequence<Range<Int64>>) {
        let sorted = ranges.filter { !$0.isEmpty }.sorted { $0.lowerBound < $1.lowerBound }
        var merged: [Range<Int64>] = []
        merged.reserveCapacity(sorted.count)
        for range in sorted {
            if let last = merged.last, range.lowerBound <= last.upperBound {
                if range.upperBound > last.upperBound { merged[merged.count - 1] = last.lowerBound..<range.upperBound }
            } else {
                merged.append(range)
            }
        }
        self.ranges = merged
    }

    var isEmpty: Bool { ranges.isEmpty }

    /// How many bytes the set holds.
    var count: Int64 { ranges.reduce(0) { $0 + ($1.upperBound - $1.lowerBound) } }

    /// The length of the run of bytes starting at 0: how many bytes from the start are all present.
    var prefixLength: Int64 {
        guard let first = ranges.first, first.lowerBound == 0 else { return 0 }
        return first.upperBound
    }

    /// Whether every byte of `range` is in the set.
    func contains(_ range: Range<Int64>) -> Bool {
        guard !range.isEmpty else { return true }
        return ranges.contains { $0.lowerBound <= range.lowerBound && range.upperBound <= $0.upperBound }
    }

    /// Adds `range`, merging it with the ranges it overlaps or touches.
    ///
    /// The ranges it reaches are found by binary search; a segment growing by one write (the common case) extends
    /// its range in place, and a range after the last one is appended.
    mutating func insert(_ range: Range<Int64>) {
        guard !range.isEmpty else { return }
        // The first range that ends at or after `range` starts: every range before it lies wholly before `range`.
        var first = 0
        var bound = ranges.count
        while first < bound {
            let middle = (first + bound) / 2
            if ranges[middle].upperBound < range.lowerBound { first = middle + 1 } else { bound = middle }
        }
        // The ranges from there that start at or before `range` ends overlap or touch it: they merge into one.
        var lower = range.lowerBound
        var upper = range.upperBound
        var end = first
        while end < ranges.count, ranges[end].lowerBound <= upper {
            lower = min(lower, ranges[end].lowerBound)
            upper = max(upper, ranges[end].upperBound)
            end += 1
        }
        switch end - first {
        case 0: ranges.insert(lower..<upper, at: first)
        case 1: ranges[first] = lower..<upper
        default: ranges.replaceSubrange(first..<end, with: CollectionOfOne(lower..<upper))
        }
    }

    /// Removes every byte at or beyond `length`.
    mutating func clip(to length: Int64) {
        ranges = ranges.compactMap { range in
            guard range.lowerBound < length else { return nil }
            return range.lowerBound..<min(range.upperBound, length)
        }
    }

    /// The ranges of `whole` that are not in the set, in order.
    func gaps(in whole: Range<Int64>) -> [Range<Int64>] {
        var gaps: [Range<Int64>] = []
        var position = whole.lowerBound
        for range in ranges where range.upperBound > position {
            if range.lowerBound >= whole.upperBound { break }
            if range.lowerBound > position { gaps.append(position..<range.lowerBound) }
            position = max(position, range.upperBound)
            if position >= whole.upperBound { break }
        }
        if position < whole.upperBound { gaps.append(position..<whole.upperBound) }
        return gaps
    }

    /// The ranges beyond the prefix (``prefixLength``).
    var rangesAfterPrefix: [Range<Int64>] {
        prefixLength > 0 ? Array(ranges.dropFirst()) : ranges
    }
}
