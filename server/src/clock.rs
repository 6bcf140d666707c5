//! The cluster clock. The sim runs on it in `scaled` mode (faster than real time, for demos)
//! or `manual` mode (moves only when told, for tests); every job timestamp is taken from it,
//! so durations stay consistent with the sim's runtimes.

use std::sync::Mutex;
use std::time::Instant;

use chrono::{DateTime, Duration, Utc};

#[derive(Debug)]
pub enum Clock {
    Scaled {
        /// Sim time at `anchor`.
        start: DateTime<Utc>,
        anchor: Instant,
        scale: f64,
    },
    Manual(Mutex<DateTime<Utc>>),
}

impl Clock {
    pub fn scaled(start: DateTime<Utc>, scale: f64) -> Clock {
        Clock::Scaled {
            start,
            anchor: Instant::now(),
            scale,
        }
    }

    pub fn manual(start: DateTime<Utc>) -> Clock {
        Clock::Manual(Mutex::new(start))
    }

    pub fn now(&self) -> DateTime<Utc> {
        match self {
            Clock::Scaled {
                start,
                anchor,
                scale,
            } => {
                let real = anchor.elapsed().as_secs_f64() * scale;
                *start + Duration::milliseconds((real * 1000.0) as i64)
            }
            Clock::Manual(t) => *t.lock().expect("clock lock"),
        }
    }

    /// Moves a manual clock forward; a scaled clock cannot be moved by hand.
    pub fn advance(&self, by: Duration) -> Option<DateTime<Utc>> {
        match self {
            Clock::Manual(t) => {
                let mut t = t.lock().expect("clock lock");
                *t += by;
                Some(*t)
            }
            Clock::Scaled { .. } => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manual_clock_moves_only_when_advanced() {
        let t0 = Utc::now();
        let c = Clock::manual(t0);
        assert_eq!(c.now(), t0);
        c.advance(Duration::seconds(90));
        assert_eq!(c.now(), t0 + Duration::seconds(90));
    }

    #[test]
    fn scaled_clock_runs_faster_than_real_time() {
        let t0 = Utc::now();
        let c = Clock::scaled(t0, 1000.0);
        std::thread::sleep(std::time::Duration::from_millis(20));
        assert!(c.now() - t0 >= Duration::seconds(19), "{}", c.now() - t0);
        assert!(c.advance(Duration::seconds(1)).is_none());
    }
}
