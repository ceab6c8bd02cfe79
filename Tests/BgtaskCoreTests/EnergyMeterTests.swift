import BgtaskCore
import Testing

/// Per-task energy, in virtual time: the machine's draw times the task's share of the CPU time used.
@Suite("energy per task: the draw attributed by CPU share, computed by hand")
struct EnergyMeterTests {
    @Test("a constant 10 W for 6 minutes at a 50 % CPU share is 0.5 Wh")
    func tenWattsHalfShare() {
        var m = EnergyMeter()
        for i in 0...36 {
            let t = Double(i) * 10
            m.add(.init(time: t, taskCPU: t * 0.5, machineCPU: t, watts: 10, source: "BAT0 power_now", uncertainty: "±15%"))
        }
        #expect(abs((m.wattHours ?? 0) - 0.5) < 1e-9)
        #expect(m.lastWatts == 5)
        #expect(m.unmeasuredSeconds == 0 && m.measuredSeconds == 360)
        let s = m.summary(batteryFullWh: 50) ?? ""
        #expect(s.hasPrefix("used ~0.5 Wh, 1 % of the battery's full energy; source: BAT0 power_now × CPU share (±15%)"), "\(s)")
    }

    @Test("a counter (RAPL) is differenced, across its wrap")
    func counterWraps() {
        var m = EnergyMeter()
        m.add(.init(time: 0, taskCPU: 0, machineCPU: 0, counterJoules: 990, counterRange: 1000, source: "RAPL"))
        m.add(.init(time: 10, taskCPU: 10, machineCPU: 10, counterJoules: 30, counterRange: 1000, source: "RAPL"))  // 40 J
        #expect(m.joules == 40)
    }

    @Test("no source is unknown, never zero; a run partly without one says how much")
    func unknownIsNotZero() {
        var m = EnergyMeter()
        m.add(.init(time: 0, taskCPU: 0, machineCPU: 0))
        m.add(.init(time: 10, taskCPU: 5, machineCPU: 10))
        #expect(m.wattHours == nil && m.summary(batteryFullWh: nil) == nil && m.unmeasuredSeconds == 10)
        // From here a reading: an interval with one end read takes that reading (36 W × 10 s × 0.5 = 180 J), twice.
        m.add(.init(time: 20, taskCPU: 10, machineCPU: 20, watts: 36))
        m.add(.init(time: 30, taskCPU: 15, machineCPU: 30, watts: 36))
        #expect(abs((m.wattHours ?? 0) - 0.1) < 1e-9)
        #expect(m.summary(batteryFullWh: nil)?.contains("33 % of the run had no source") == true, "\(m.summary(batteryFullWh: nil) ?? "")")
    }

    @Test("a share is at most the whole machine's, and a machine that did not move gives the task nothing")
    func shareBounds() {
        var m = EnergyMeter()
        m.add(.init(time: 0, taskCPU: 0, machineCPU: 0, watts: 10))
        m.add(.init(time: 10, taskCPU: 20, machineCPU: 10, watts: 10))     // clamped to 1
        #expect(m.joules == 100)
        m.add(.init(time: 20, taskCPU: 20, machineCPU: 10, watts: 10))     // machine counter still
        #expect(m.joules == 100)
    }
}
