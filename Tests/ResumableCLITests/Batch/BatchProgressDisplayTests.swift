import Foundation
import Testing

@testable import ResumableCLI

/// The progress display of a batch: golden lines at several widths, the redraw-in-place sequences, the plain
/// lines, and the throttle.
@Suite("Batch progress display")
struct BatchProgressDisplayTests {
    /// Six downloads in every state, with long, hostile and wide names and zero and unknown lengths.
    private static let snapshot = BatchSnapshot(
        active: [
            .init(
                name: "debian-12.4.0-amd64-netinst.iso", bytesOnDisk: 230_000_000, expectedLength: 658_505_728,
                bytesPerSecond: 4_200_000),
            .init(name: "notes.txt", bytesOnDisk: 12_345, bytesPerSecond: 2048),
            .init(name: "\u{1B}[2Jevil\r\nname\u{202E}txt.exe", bytesOnDisk: 0, expectedLength: 0),
            .init(
                name: String(repeating: "long-name-", count: 12) + ".tar.gz", bytesOnDisk: 5_000_000,
                expectedLength: 10_000_000, state: .retrying(attempt: 2)),
            .init(name: "日本語のファイル名.zip", state: .connecting),
            .init(name: "checked.bin", bytesOnDisk: 1 << 30, expectedLength: 1 << 30, state: .verifying),
        ],
        filesDone: 3, filesFailed: 1, filesTotal: 10, bytesOnDisk: 2_000_000_000, expectedBytes: 4_000_000_000,
        bytesPerSecond: 12_000_000, estimatedTimeRemaining: .seconds(185))

    @Test("Width 20: names cut in the middle, the status shortened to what fits")
    func width20() {
        #expect(
            BatchProgressDisplay.blockLines(Self.snapshot, width: 20) == [
                "debi…iso   34%",
                "note…txt  12.1 KiB",
                "\\u{1…exe  100%",
                "long….gz  retrying",
                "日本…zip  connectin",
                "chec…bin  verifying",
                "3/10 done, 1 failed",
            ])
    }

    @Test("Width 80: aligned names, bars of one width, escaped hostile names, wide characters counted twice")
    func width80() {
        #expect(
            BatchProgressDisplay.blockLines(Self.snapshot, width: 80) == [
                "debian-12…tinst.iso   34% [====>         ] 219.3 MiB / 628.0 MiB  4.0 MiB/s",
                "notes.txt            12.1 KiB  2.0 KiB/s",
                "\\u{1B}[2J…E}txt.exe  100% [==============] 0 B / 0 B  0 B/s",
                "long-name…e-.tar.gz  4.8 MiB / 9.5 MiB  retrying (attempt 2)",
                "日本語の…イル名.zip  connecting",
                "checked.bin          verifying SHA-256",
                "Total  3/10 done, 1 failed  1.9 GiB / 3.7 GiB  11.4 MiB/s  ETA 3:05",
            ])
    }

    @Test("Width 200: whole names up to a quarter of the width")
    func width200() {
        #expect(
            BatchProgressDisplay.blockLines(Self.snapshot, width: 200) == [
                "debian-12.4.0-amd64-netinst.iso                     34% [======>             ] 219.3 MiB / 628.0 MiB  4.0 MiB/s",
                "notes.txt                                          12.1 KiB  2.0 KiB/s",
                "\\u{1B}[2Jevil\\u{D}\\u{A}name\\u{202E}txt.exe         100% [====================] 0 B / 0 B  0 B/s",
                "long-name-long-name-long…g-name-long-name-.tar.gz  4.8 MiB / 9.5 MiB  retrying (attempt 2)",
                "日本語のファイル名.zip                             connecting",
                "checked.bin                                        verifying SHA-256",
                "Total  3/10 done, 1 failed  1.9 GiB / 3.7 GiB  11.4 MiB/s  ETA 3:05",
            ])
    }

    @Test("Every line stays a column short of the width, from 1 to 250 columns")
    func everyWidth() {
        for width in 1...250 {
            for line in BatchProgressDisplay.blockLines(Self.snapshot, width: width) {
                #expect(DisplayWidth.columns(line) <= max(width - 1, 1), "width \(width): \(line)")
                #expect(!line.contains("\u{1B}"))
            }
        }
    }

    @Test("Unknown and zero lengths; an empty batch")
    func lengths() {
        let unknown = BatchSnapshot(active: [.init(name: "a", bytesOnDisk: 100)], filesTotal: 1)
        #expect(
            BatchProgressDisplay.blockLines(unknown, width: 80) == ["a  100 B  0 B/s", "Total  0/1 done  0 B  0 B/s"])
        #expect(BatchProgressDisplay.totalLine(unknown) == "0 of 1 files done, 1 active; 0 B at 0 B/s")
        let empty = BatchSnapshot(filesTotal: 0)
        #expect(BatchProgressDisplay.blockLines(empty, width: 80) == ["Total  0/0 done  0 B  0 B/s"])
        #expect(BatchProgressDisplay.totalLine(empty) == "0 of 0 files done; 0 B at 0 B/s")
    }

    @Test("More downloads than rows: the last line counts the rest")
    func height() {
        #expect(
            BatchProgressDisplay.blockLines(Self.snapshot, width: 80, height: 5) == [
                "debian-12…tinst.iso   34% [====>         ] 219.3 MiB / 628.0 MiB  4.0 MiB/s",
                "notes.txt            12.1 KiB  2.0 KiB/s",
                "… and 4 more",
                "Total  3/10 done, 1 failed  1.9 GiB / 3.7 GiB  11.4 MiB/s  ETA 3:05",
            ])
        #expect(
            BatchProgressDisplay.blockLines(Self.snapshot, width: 80, height: 2) == [
                "6 downloads active", "Total  3/10 done, 1 failed  1.9 GiB / 3.7 GiB  11.4 MiB/s  ETA 3:05",
            ])
        #expect(BatchProgressDisplay.blockLines(Self.snapshot, width: 80, height: 8).count == 7)
    }

    @Test("Redraws move up over the block, write events above it, and clear what is left; erase removes it")
    func redrawSequences() {
        let two = BatchSnapshot(
            active: [
                .init(name: "a.iso", bytesOnDisk: 512, expectedLength: 1024), .init(name: "b", state: .connecting),
            ],
            filesTotal: 2)
        let one = BatchSnapshot(
            active: [.init(name: "a.iso", bytesOnDisk: 1024, expectedLength: 1024)], filesDone: 1, filesTotal: 2,
            bytesOnDisk: 0)
        var display = BatchProgressDisplay()
        let nothing = display.erase()
        #expect(nothing == "")

        let first = display.redraw(two, width: 40)
        #expect(
            first
                == "\ra.iso   50%    512 B / 1.0 KiB  0 B/s\u{1B}[K\nb      connecting\u{1B}[K\n"
                + "Total  0/2 done  0 B  0 B/s\u{1B}[K\n\u{1B}[J")
        #expect(display.drawnLines == 3)

        let withEvent = display.redraw(one, events: [.finished(name: "b\u{1B}[31m", bytes: 2048)], width: 40)
        #expect(
            withEvent
                == "\r\u{1B}[3A\u{1B}[JFinished b\\u{1B}[31m (2.0 KiB)\n"
                + "a.iso  100%  1.0 KiB / 1.0 KiB  0 B/s\u{1B}[K\nTotal  1/2 done  0 B  0 B/s\u{1B}[K\n\u{1B}[J")
        #expect(display.drawnLines == 2)

        // Without events, each line clears its own rest: nothing is cleared before it is drawn again.
        let again = display.redraw(one, width: 40)
        #expect(
            again
                == "\r\u{1B}[2Aa.iso  100%  1.0 KiB / 1.0 KiB  0 B/s\u{1B}[K\nTotal  1/2 done  0 B  0 B/s\u{1B}[K\n\u{1B}[J"
        )

        let erased = display.erase()
        #expect(erased == "\r\u{1B}[2A\u{1B}[J")
        #expect(display.drawnLines == 0)
        let erasedAgain = display.erase()
        #expect(erasedAgain == "")
    }

    @Test("Plain lines: one per event, escaped; the total line")
    func plainLines() {
        #expect(
            BatchProgressDisplay.plainLines(for: [
                .started(name: "a.iso", expectedLength: 1 << 20),
                .started(name: "b", expectedLength: nil),
                .finished(name: "a.iso", bytes: 1 << 20),
                .failed(name: "c\u{1B}]0;x\u{7}", message: "the server answered 404\nNot Found\u{202E}"),
            ]) == [
                "Started a.iso (1.0 MiB)",
                "Started b",
                "Finished a.iso (1.0 MiB)",
                "Failed c\\u{1B}]0;x\\u{7}: the server answered 404\\u{A}Not Found\\u{202E}",
            ])
        #expect(
            BatchProgressDisplay.totalLine(Self.snapshot)
                == "3 of 10 files done, 1 failed, 6 active; 1.9 GiB of 3.7 GiB (50%) at 11.4 MiB/s, ETA 3:05")
    }

    @Test("The throttle allows a draw at most once per interval and remembers a refused one")
    func throttle() {
        let start = ContinuousClock.now
        var throttle = RedrawThrottle(interval: RedrawThrottle.terminalInterval)
        var answers: [Bool] = []
        answers.append(throttle.request(at: start))
        #expect(!throttle.isPending && throttle.due == nil)
        answers.append(throttle.request(at: start + .milliseconds(40)))
        answers.append(throttle.request(at: start + .milliseconds(99)))
        #expect(throttle.isPending && throttle.due == start + .milliseconds(100))
        answers.append(throttle.request(at: start + .milliseconds(100)))
        #expect(!throttle.isPending && throttle.due == nil)
        answers.append(throttle.request(at: start + .milliseconds(150)))
        answers.append(throttle.request(at: start + .milliseconds(400)))
        #expect(answers == [true, false, false, true, false, true])

        var plain = RedrawThrottle(interval: RedrawThrottle.plainInterval, startingAt: start)
        let early = plain.request(at: start + .seconds(1))
        #expect(!early && plain.due == start + .seconds(5))
        let onTime = plain.request(at: start + .seconds(5))
        #expect(onTime)
    }

    @Test("Display widths: wide characters count two, cuts keep within the budget")
    func displayWidth() {
        #expect(DisplayWidth.columns("abc") == 3)
        #expect(DisplayWidth.columns("日本") == 4)
        #expect(DisplayWidth.columns("e\u{301}") == 1)
        #expect(DisplayWidth.columns("👨‍👩‍👧‍👦🇺🇳") == 4)
        #expect(DisplayWidth.columns("é…→") == 3)
        #expect(DisplayWidth.prefix("日本語", columns: 5) == "日本")
        #expect(DisplayWidth.suffix("日本語", columns: 3) == "語")
        #expect(DisplayWidth.middleTruncated("abcdefghij.iso", columns: 9) == "abcd….iso")
        #expect(DisplayWidth.middleTruncated("abcdef", columns: 4) == "abcd")
        #expect(DisplayWidth.middleTruncated("abc", columns: 4) == "abc")
    }
}
