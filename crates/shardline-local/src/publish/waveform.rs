//! What a simulated device measures: each metric's value at a time, a pure function of
//! the seed, the device and the run it is shaped to.
//!
//! Every device follows a slow cycle (two periods over the run, at a phase and level of
//! its own) with noise; some devices also step up and stay there, others spike for a
//! moment, and the hot device (the one the demo's series draws) does both. A minute's
//! rollup keeps the spike in its max and loses it from its average, and its average
//! follows the cycle and the step only minute by minute: the series picture shows what
//! the rollups keep and what they lose.
//!
//! No state and no clock: the noise is a hash of (seed, device, metric, time), so the
//! value at a time is the same whichever readings were generated before it.

/// A step: from `at_ms` on, `temp_c` is `height` higher (and humidity lower).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Step {
    /// When it steps, epoch ms.
    pub at_ms: i64,
    /// How much `temp_c` rises.
    pub height: f64,
}

/// A spike: for `width_ms` from `at_ms`, `temp_c` is `height` higher.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Spike {
    /// When it starts, epoch ms.
    pub at_ms: i64,
    /// How long it lasts.
    pub width_ms: i64,
    /// How much `temp_c` rises while it lasts.
    pub height: f64,
}

/// `temp_c` of a device with no offset, no cycle and no event.
const TEMP_BASE: f64 = 15.0;
/// Half the swing of `temp_c`'s cycle.
const TEMP_CYCLE: f64 = 6.0;
/// Most noise of `temp_c`, either way.
pub const TEMP_NOISE: f64 = 0.8;
/// Most a device's level lies from [`TEMP_BASE`], either way.
const TEMP_OFFSET: f64 = 5.0;
/// A step's rise of `temp_c`.
pub const STEP_HEIGHT: f64 = 8.0;
/// A spike's rise of `temp_c`: more than the cycle's whole swing, the step and the
/// noise together, so a spike's every reading is above every other of the run.
pub const SPIKE_HEIGHT: f64 = 25.0;
/// Cycles over the run.
const CYCLES: f64 = 2.0;
/// Where in the run a step may fall, as fractions of it.
const STEP_WITHIN: (f64, f64) = (0.5, 0.7);
/// Where in the run a spike may start, as fractions of it (before any step).
const SPIKE_WITHIN: (f64, f64) = (0.15, 0.35);
/// A spike lasts a sixtieth of the run (a second of a minute's run), at least this.
const MIN_SPIKE_MS: i64 = 250;

/// One device's waveform over one run.
#[derive(Debug, Clone, PartialEq)]
pub struct Waveform {
    seed: u64,
    device: u64,
    start_ms: i64,
    period_ms: f64,
    phase: f64,
    offset: f64,
    step: Option<Step>,
    spike: Option<Spike>,
}

impl Waveform {
    /// `device`'s waveform for a run of `span_ms` from `start_ms`. A quarter of the
    /// devices step, another quarter spike, by a hash of the seed and the device; the
    /// others only cycle.
    pub fn new(seed: u64, device: &str, start_ms: i64, span_ms: i64) -> Self {
        let span_ms = span_ms.max(1);
        let device = fnv(device.as_bytes());
        let mut wave = Self {
            seed,
            device,
            start_ms,
            period_ms: span_ms as f64 / CYCLES,
            phase: 0.0,
            offset: 0.0,
            step: None,
            spike: None,
        };
        wave.phase = wave.unit(1) * std::f64::consts::TAU;
        wave.offset = (wave.unit(2) * 2.0 - 1.0) * TEMP_OFFSET;
        match mix(seed ^ mix(device)) % 4 {
            0 => wave.step = Some(wave.its_step()),
            1 => wave.spike = Some(wave.its_spike()),
            _ => {}
        }
        wave
    }

    /// The same waveform with both its step and its spike (the hot device's).
    pub fn with_step_and_spike(self) -> Self {
        Self {
            step: Some(self.its_step()),
            spike: Some(self.its_spike()),
            ..self
        }
    }

    /// The run's length.
    fn span_ms(&self) -> f64 {
        self.period_ms * CYCLES
    }

    /// A fraction in [0, 1) of the seed, the device and `salt`.
    fn unit(&self, salt: u64) -> f64 {
        unit(mix(self.seed ^ mix(self.device ^ salt)))
    }

    /// A time within `(lo, hi)` fractions of the run, by `salt`.
    fn within(&self, (lo, hi): (f64, f64), salt: u64) -> i64 {
        self.start_ms + ((lo + (hi - lo) * self.unit(salt)) * self.span_ms()) as i64
    }

    /// The step this device takes when it steps.
    fn its_step(&self) -> Step {
        Step {
            at_ms: self.within(STEP_WITHIN, 3),
            height: STEP_HEIGHT,
        }
    }

    /// The spike this device makes when it spikes.
    fn its_spike(&self) -> Spike {
        Spike {
            at_ms: self.within(SPIKE_WITHIN, 4),
            width_ms: ((self.span_ms() / 60.0) as i64).max(MIN_SPIKE_MS),
            height: SPIKE_HEIGHT,
        }
    }

    /// Its step, if it steps.
    pub fn step(&self) -> Option<Step> {
        self.step
    }

    /// Its spike, if it spikes.
    pub fn spike(&self) -> Option<Spike> {
        self.spike
    }

    /// The cycle at `t_ms`, from -1 to 1.
    fn cycle(&self, t_ms: i64) -> f64 {
        let turns = (t_ms - self.start_ms) as f64 / self.period_ms;
        (turns * std::f64::consts::TAU + self.phase).sin()
    }

    /// What the step and the spike add to `temp_c` at `t_ms`.
    pub fn events(&self, t_ms: i64) -> f64 {
        let step = self
            .step
            .filter(|s| t_ms >= s.at_ms)
            .map_or(0.0, |s| s.height);
        let spike = self
            .spike
            .filter(|s| (s.at_ms..s.at_ms + s.width_ms).contains(&t_ms))
            .map_or(0.0, |s| s.height);
        step + spike
    }

    /// `temp_c` at `t_ms` without its noise.
    pub fn temp_c_clean(&self, t_ms: i64) -> f64 {
        TEMP_BASE + self.offset + TEMP_CYCLE * self.cycle(t_ms) + self.events(t_ms)
    }

    /// `temp_c` at `t_ms`.
    pub fn temp_c(&self, t_ms: i64) -> f64 {
        self.temp_c_clean(t_ms) + TEMP_NOISE * self.noise(0, t_ms)
    }

    /// `humidity` at `t_ms`: against the cycle, a little lower after a step, within
    /// 10 to 95.
    pub fn humidity(&self, t_ms: i64) -> f64 {
        let stepped = self.step.filter(|s| t_ms >= s.at_ms).map_or(0.0, |_| 4.0);
        let value = 55.0 + 2.0 * self.offset - 10.0 * self.cycle(t_ms) - stepped
            + 1.5 * self.noise(1, t_ms);
        value.clamp(10.0, 95.0)
    }

    /// `battery_v` at `t_ms`: draining slowly over the run, within 3.0 to 4.2.
    pub fn battery_v(&self, t_ms: i64) -> f64 {
        let run = (t_ms - self.start_ms) as f64 / self.span_ms();
        let value = 3.9 + self.offset / 50.0 - 0.05 * run + 0.01 * self.noise(2, t_ms);
        value.clamp(3.0, 4.2)
    }

    /// Noise of `metric` at `t_ms`, from -1 to 1.
    fn noise(&self, metric: u64, t_ms: i64) -> f64 {
        let h = mix(self.seed ^ mix(self.device ^ mix(metric ^ mix(t_ms as u64))));
        unit(h) * 2.0 - 1.0
    }
}

/// FNV-1a of `bytes`.
fn fnv(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// SplitMix64's finalizer: every input bit moves every output bit.
fn mix(x: u64) -> u64 {
    let x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    let x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// `h` as a fraction in [0, 1).
fn unit(h: u64) -> f64 {
    (h >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    const START: i64 = 1_750_000_000_000;
    const SPAN: i64 = 60_000;

    fn wave(device: &str) -> Waveform {
        Waveform::new(7, device, START, SPAN)
    }

    fn hot() -> Waveform {
        wave("sensor-alpha-001").with_step_and_spike()
    }

    #[test]
    fn the_value_at_a_time_is_a_function_of_seed_device_and_time() {
        let a = wave("dev-00001");
        assert_eq!(
            a.temp_c(START + 1234),
            wave("dev-00001").temp_c(START + 1234)
        );
        assert_ne!(
            a.temp_c(START + 1234),
            wave("dev-00002").temp_c(START + 1234)
        );
        let other = Waveform::new(8, "dev-00001", START, SPAN);
        assert_ne!(a.temp_c(START + 1234), other.temp_c(START + 1234));
        // Noise: near times differ, within the noise's bound of the clean value.
        assert_ne!(a.temp_c(START + 1234), a.temp_c(START + 1235));
        for t in (START..START + SPAN).step_by(7) {
            let noise = a.temp_c(t) - a.temp_c_clean(t);
            assert!(noise.abs() <= TEMP_NOISE, "{t}: {noise}");
        }
    }

    /// Two cycles over the run: a half period apart, the clean value swings by twice
    /// the cycle's half-swing, and it comes back after a period.
    #[test]
    fn every_device_cycles_twice_over_the_run() {
        let w = wave("dev-00003");
        let period = SPAN / 2;
        let (lo, hi) = (START..START + period)
            .step_by(10)
            .map(|t| w.temp_c_clean(t) - w.events(t))
            .fold((f64::MAX, f64::MIN), |(lo, hi), v| (lo.min(v), hi.max(v)));
        assert!((hi - lo - 2.0 * TEMP_CYCLE).abs() < 0.01, "{lo} {hi}");
        let t = START + 5_000;
        let back =
            (w.temp_c_clean(t) - w.events(t)) - (w.temp_c_clean(t + period) - w.events(t + period));
        assert!(back.abs() < 1e-9, "{back}");
    }

    /// The hot device steps and spikes inside the run, the spike before the step: the
    /// events add nothing before the spike, the spike's height while it lasts, nothing
    /// between, and the step's height from the step on.
    #[test]
    fn the_hot_device_spikes_then_steps() {
        let w = hot();
        let (step, spike) = (w.step().unwrap(), w.spike().unwrap());
        assert!(START < spike.at_ms && spike.at_ms + spike.width_ms < step.at_ms);
        assert!(step.at_ms < START + SPAN);
        assert_eq!(spike.width_ms, 1_000);
        assert_eq!(w.events(spike.at_ms - 1), 0.0);
        assert_eq!(w.events(spike.at_ms), SPIKE_HEIGHT);
        assert_eq!(w.events(spike.at_ms + spike.width_ms - 1), SPIKE_HEIGHT);
        assert_eq!(w.events(spike.at_ms + spike.width_ms), 0.0);
        assert_eq!(w.events(step.at_ms - 1), 0.0);
        assert_eq!(w.events(step.at_ms), STEP_HEIGHT);
        assert_eq!(w.events(START + SPAN - 1), STEP_HEIGHT);
        // The step lifts the level: a second after it is above a second before it by
        // the step less what the cycle and the noise can take away.
        let mean = |from: i64| (from..from + 1_000).map(|t| w.temp_c(t)).sum::<f64>() / 1_000.0;
        let rise = mean(step.at_ms) - mean(step.at_ms - 1_000);
        let cycle_moves = TEMP_CYCLE * std::f64::consts::TAU * 2_000.0 / (SPAN / 2) as f64;
        assert!(
            rise > STEP_HEIGHT - cycle_moves - 2.0 * TEMP_NOISE,
            "{rise}"
        );
    }

    /// Some devices step, others spike, most only cycle; each event falls inside the
    /// run, and the other metrics stay in their ranges.
    #[test]
    fn some_devices_step_and_others_spike() {
        let (mut steps, mut spikes, mut plain) = (0, 0, 0);
        for i in 0..200 {
            let w = wave(&format!("dev-{i:05}"));
            match (w.step(), w.spike()) {
                (Some(s), None) => {
                    steps += 1;
                    assert!((START..START + SPAN).contains(&s.at_ms));
                }
                (None, Some(s)) => {
                    spikes += 1;
                    assert!((START..START + SPAN - s.width_ms).contains(&s.at_ms));
                }
                (None, None) => plain += 1,
                (Some(_), Some(_)) => panic!("only the hot device does both"),
            }
            for t in (START..START + SPAN).step_by(997) {
                assert!((10.0..=95.0).contains(&w.humidity(t)));
                assert!((3.0..=4.2).contains(&w.battery_v(t)));
                assert!((-5.0..=60.0).contains(&w.temp_c(t)), "{}", w.temp_c(t));
            }
        }
        assert!(
            steps > 20 && spikes > 20 && plain > 60,
            "{steps} {spikes} {plain}"
        );
    }
}
