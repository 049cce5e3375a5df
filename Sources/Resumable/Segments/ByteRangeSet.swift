/// A set of byte positions, kept as sorted, disjoint, non-adjacent half-open ranges.
///
/// Which bytes of a temporary file are known to hold the representation: the prefix and the segments a
/// multi-connection download finished. Pure value; every operation keeps the ranges normalized.
struct ByteRangeSet: Hashable, Sendable {
    /// The ranges, sorted, non-empty, neither overlapping nor touching.
    private(set) var ranges: [Range<Int64>] = []

    init() {}

    /// The set of the given ranges (in any order, overlapping or not; empty ones are ignored).
    init(_ ranges: some Sequence<Range<Int64>>) {
        for range in ranges { insert(range) }
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
    mutating func insert(_ range: Range<Int64>) {
        guard !range.isEmpty else { return }
        // The common case, a segment growing by one write: extend the range it continues, in place.
        if let index = ranges.firstIndex(where: {
            $0.lowerBound <= range.lowerBound && range.lowerBound <= $0.upperBound
        }),
            index + 1 == ranges.count || range.upperBound < ranges[index + 1].lowerBound
        {
            if range.upperBound > ranges[index].upperBound {
                ranges[index] = ranges[index].lowerBound..<range.upperBound
            }
            return
        }
        var lower = range.lowerBound
        var upper = range.upperBound
        var kept: [Range<Int64>] = []
        kept.reserveCapacity(ranges.count + 1)
        var placed = false
        for existing in ranges {
            if existing.upperBound < lower {
                kept.append(existing)
            } else if existing.lowerBound > upper {
                if !placed {
                    kept.append(lower..<upper)
                    placed = true
                }
                kept.append(existing)
            } else {
                lower = min(lower, existing.lowerBound)
                upper = max(upper, existing.upperBound)
            }
        }
        if !placed { kept.append(lower..<upper) }
        ranges = kept
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
