//! Holding a shaped request whose buckets span cluster slots, the pure
//! part (docs/shaping.md, "Across slots"): every slot must record it at the
//! time it is released, so the turns a first round gave are brought to the
//! latest of them.
//!
//! Times are on the proxy's clock. A group's call queued at `q` and answered
//! at `a` with `delay_ms` d placed its turn in `[q + d, a + d]` (the store's
//! `now` lies between): [`Placed`]. The **target** is the latest lower bound
//! of any group; a group whose lower bound is below it **moves**: its record
//! is given back and it is decided again with a floor of `target - q'`
//! (`q'` the new call's queue time), so its turn is at the target or later.
//! A move placed later than the target (its windows were full there) raises
//! the target, and the groups below move again. Rounds end when no group is
//! below the target: the request is released at the latest upper bound, so
//! never before any turn, and every turn lies within the round trips of the
//! last round before the release. After [`MAX_MOVES`] move rounds the
//! request gives up (every record undone, denied). Every call's `max_delay`
//! is what is left until the deadline (first queue time + `max_delay`), so
//! no lower bound passes it.

/// Move rounds at most before a request gives up.
pub const MAX_MOVES: u32 = 3;

/// Where a group's turn lies on the proxy's clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Placed {
    pub lo_ms: u64,
    pub hi_ms: u64,
}

impl Placed {
    /// A call queued at `queued_ms`, answered at `now_ms` with `delay_ms`.
    pub fn new(queued_ms: u64, now_ms: u64, delay_ms: u64) -> Placed {
        Placed { lo_ms: queued_ms.saturating_add(delay_ms), hi_ms: now_ms.max(queued_ms).saturating_add(delay_ms) }
    }
}

/// What follows once no group waits and every group admitted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Next {
    /// Every group's turn is at the target: release at this time.
    Release(u64),
    /// Move these groups (give back, decide again floored).
    Move(Vec<usize>),
    /// Too many rounds: undo every record, deny.
    GiveUp,
}

/// One request's rounds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rounds {
    pub target_ms: u64,
    pub deadline_ms: u64,
    pub moves: u32,
    /// Per group, its last placement.
    pub placed: Vec<Option<Placed>>,
}

impl Rounds {
    /// `groups` groups, first queued at `queued_ms`, waiting `max_delay_ms`
    /// at most.
    pub fn new(groups: usize, queued_ms: u64, max_delay_ms: u64) -> Rounds {
        Rounds {
            target_ms: 0,
            deadline_ms: queued_ms.saturating_add(max_delay_ms),
            moves: 0,
            placed: vec![None; groups],
        }
    }

    /// Group `g` admitted: its placement.
    pub fn place(&mut self, g: usize, placed: Placed) {
        self.target_ms = self.target_ms.max(placed.lo_ms);
        if let Some(p) = self.placed.get_mut(g) {
            *p = Some(placed);
        }
    }

    /// Once every group is placed: release, move those below the target,
    /// or give up.
    pub fn round_ended(&mut self) -> Next {
        let below: Vec<usize> = (0..self.placed.len())
            .filter(|&g| self.placed.get(g).copied().flatten().is_none_or(|p| p.lo_ms < self.target_ms))
            .collect();
        if below.is_empty() {
            let release = self.placed.iter().flatten().map(|p| p.hi_ms).max().unwrap_or(self.target_ms);
            return Next::Release(release);
        }
        if self.moves >= MAX_MOVES {
            return Next::GiveUp;
        }
        self.moves += 1;
        for &g in &below {
            if let Some(p) = self.placed.get_mut(g) {
                *p = None;
            }
        }
        Next::Move(below)
    }

    /// The shape of a move's call queued at `queued_ms`: `(max_delay, floor)`.
    pub fn shape(&self, queued_ms: u64) -> (u64, u64) {
        (self.deadline_ms.saturating_sub(queued_ms), self.target_ms.saturating_sub(queued_ms))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[wasm_bindgen_test::wasm_bindgen_test(unsupported = test)]
    fn groups_below_the_target_move_until_none_is() {
        let mut r = Rounds::new(3, 100, 2_000);
        r.place(0, Placed::new(100, 110, 0));
        r.place(1, Placed::new(100, 112, 500));
        r.place(2, Placed::new(100, 111, 500));
        assert_eq!(r.round_ended(), Next::Move(vec![0]));
        assert_eq!(r.shape(112), (1_988, 488));
        // Placed at the floor: released at the latest upper bound.
        r.place(0, Placed::new(112, 120, 488));
        assert_eq!(r.round_ended(), Next::Release(612));
        // A move placed later raises the target: the others move.
        let mut r = Rounds::new(2, 0, 5_000);
        r.place(0, Placed::new(0, 0, 0));
        r.place(1, Placed::new(0, 0, 100));
        assert_eq!(r.round_ended(), Next::Move(vec![0]));
        r.place(0, Placed::new(0, 0, 300));
        assert_eq!(r.round_ended(), Next::Move(vec![1]));
        r.place(1, Placed::new(0, 0, 900));
        assert_eq!(r.round_ended(), Next::Move(vec![0]));
        r.place(0, Placed::new(0, 0, 950));
        assert_eq!(r.round_ended(), Next::GiveUp, "a fourth round");
    }
}
