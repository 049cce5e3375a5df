/// A small seeded pseudo-random generator (SplitMix64), so that a soak run can be replayed from its seed.
///
/// The standard library's generator cannot be seeded; this one can, and it is fast and good enough to pick
/// faults. Each download of a soak draws from its own stream (``init(seed:stream:)``), so its plan does not
/// depend on how many numbers the other downloads drew or in which order they ran.
struct SoakRandom: RandomNumberGenerator, Sendable {
    private var state: UInt64

    /// A generator starting at `seed`.
    init(seed: UInt64) {
        state = seed
    }

    /// The generator for item `stream` of the run seeded with `seed`.
    init(seed: UInt64, stream: UInt64) {
        var mixer = SoakRandom(seed: seed ^ (stream &* 0xD1B5_4A32_D192_ED03))
        _ = mixer.next()
        self.init(seed: mixer.next())
    }

    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }

    /// `true` with probability `probability`.
    mutating func chance(_ probability: Double) -> Bool {
        Double(next() >> 11) / Double(1 << 53) < probability
    }

    /// A value in `range`.
    mutating func int(_ range: ClosedRange<Int>) -> Int {
        Int.random(in: range, using: &self)
    }

    /// One of `choices`, which must not be empty.
    mutating func pick<T>(_ choices: [T]) -> T {
        choices[Int.random(in: 0..<choices.count, using: &self)]
    }
}
