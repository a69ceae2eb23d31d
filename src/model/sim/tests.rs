use super::*;

/// The seeds to run: `TOLLGATE_SIM_SEEDS` of them (2,000 by default) from
/// `TOLLGATE_SIM_FROM` (0): `make sim` runs many more, and one seed
/// replays with `TOLLGATE_SIM_FROM=<seed> TOLLGATE_SIM_SEEDS=1`.
fn seeds() -> std::ops::Range<u64> {
    let var = |name: &str| std::env::var(name).ok().and_then(|s| s.parse::<u64>().ok());
    let from = var("TOLLGATE_SIM_FROM").unwrap_or(0);
    from..from + var("TOLLGATE_SIM_SEEDS").unwrap_or(2_000)
}

#[test]
fn random_traces_keep_every_stated_bound() {
    let mut tally = Tally::default();
    let mut failures = Vec::new();
    for seed in seeds() {
        match check_seed(seed) {
            Ok(t) => tally.add(&t),
            Err(e) => failures.push(e),
        }
        if failures.len() >= 3 {
            break;
        }
    }
    println!("{tally:?}");
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
    if tally.runs >= 100 {
        assert!(tally.override_runs > 0 && tally.overridden > 0, "the seeds decide by overrides: {tally:?}");
    }
}
