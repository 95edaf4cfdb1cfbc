#!/usr/bin/python3
"""Runs the model checker (machine.py) against the real store: rounds of
hypothesis stateful runs, each with its own seed, in the embedded, the
cluster and the ha configuration (world.py) in turn, until the time is up.

    tests/model/run.py [--seconds N] [--config embedded|cluster|ha|both|all]
                       [--faults enospc,idle,nodekill,nodestop,masterrestart,latereport,
                                 mountstop,failover,etcdstop|all|none]
                       [--seed N] [--examples N] [--steps N] [--no-shrink]

Environment (for make): MC_SOAK_SECONDS, MC_MODEL_CONFIG, MC_MODEL_FAULTS,
MC_MODEL_SEED, MC_MODEL_EXAMPLES, MC_MODEL_STEPS, MC_MODEL_MIN_STEPS, MC_MODEL_SHRINK=0,
MC_MODEL_SHRINK_SECONDS (default 60, 300 for runs of 10 minutes or more),
MC_MODEL_VERBOSE=1 (print every step),
MC_MODEL_REPRODUCE (the blob of a printed @reproduce_failure), MC_BUILD.

Each round prints its configuration and seed; a failing round prints the
shortest sequence of steps hypothesis found and the command that replays it.
--config both is embedded and cluster; all (the default) adds ha, which
needs etcd (Debian's etcd-server): without it ha is left out, and said so.
Exit status: 0 all rounds passed, 1 a round failed, 77 skipped (no FUSE, no
hypothesis).
"""

import argparse
import os
import random
import shutil
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

SKIP = 77


def env_int(name, default):
    v = os.environ.get(name, "")
    return int(v) if v.strip() else default


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=env_int("MC_SOAK_SECONDS", 90),
                    help="stop starting rounds after this long (default 90)")
    ap.add_argument("--config", default=os.environ.get("MC_MODEL_CONFIG", "all"),
                    choices=["embedded", "cluster", "ha", "both", "all"])
    ap.add_argument("--faults", default=os.environ.get("MC_MODEL_FAULTS", "default"),
                    help="comma-separated fault classes, 'all', 'none' or 'default' "
                         "(all but idle and mountstop unless the master has --put-ttl-ms)")
    seed = os.environ.get("MC_MODEL_SEED", "")
    ap.add_argument("--seed", type=int, default=int(seed) if seed.strip() else None,
                    help="the first round's seed (default: 1; --random: a random one)")
    ap.add_argument("--random", action="store_true", help="start from a random seed")
    ap.add_argument("--examples", type=int, default=env_int("MC_MODEL_EXAMPLES", 3),
                    help="hypothesis examples per round (default 3)")
    ap.add_argument("--steps", type=int, default=env_int("MC_MODEL_STEPS", 25),
                    help="steps per example (default 25)")
    ap.add_argument("--min-steps", type=int, default=env_int("MC_MODEL_MIN_STEPS", 10),
                    help="steps every example runs at least (default 10)")
    ap.add_argument("--rounds", type=int, default=0, help="stop after this many rounds")
    ap.add_argument("--no-shrink", action="store_true",
                    default=os.environ.get("MC_MODEL_SHRINK", "1") == "0")
    return ap.parse_args()


def bound_shrinking(engine, seconds):
    """hypothesis stops shrinking after 300 s (hard-coded); every example
    here restarts processes, so bound it to `seconds` instead: the deadline
    it sets is moved earlier as it is stored."""

    def get(runner):
        return runner.__dict__.get("_mc_shrink_deadline")

    def put(runner, value):
        runner.__dict__["_mc_shrink_deadline"] = None if value is None else value - 300 + seconds

    engine.ConjectureRunner.finish_shrinking_deadline = property(get, put)


def main():
    a = parse_args()
    if not os.path.exists("/dev/fuse"):
        print("model: skipped: no /dev/fuse")
        return SKIP
    try:
        import hypothesis
        from hypothesis import HealthCheck, Phase, Verbosity, settings
        from hypothesis.internal.conjecture import engine
    except ImportError:
        print("model: skipped: no hypothesis (apt-get install python3-hypothesis)")
        return SKIP
    import machine
    from runner import run_machine
    import world

    if a.faults == "default":
        idle_ok = world.put_ttl_option(world.harness.MASTER)[1] < 30000
        faults = [f for f in machine.ALL_FAULTS if f not in machine.PUT_TTL_FAULTS or idle_ok]
    elif a.faults == "all":
        faults = list(machine.ALL_FAULTS)
    elif a.faults in ("none", ""):
        faults = []
    else:
        faults = [f for f in a.faults.split(",") if f]
        bad = set(faults) - set(machine.ALL_FAULTS)
        if bad:
            print(f"model: unknown fault classes {sorted(bad)}; known: {machine.ALL_FAULTS}")
            return 2
    configs = {"both": ["embedded", "cluster"], "all": ["embedded", "cluster", "ha"]}.get(
        a.config, [a.config])
    if "ha" in configs and not shutil.which("etcd"):
        if configs == ["ha"]:
            print("model: skipped: ha needs etcd (Debian's etcd-server; packaging/deps.sh)")
            return SKIP
        print("model: the ha configuration left out: no etcd (Debian's etcd-server)")
        configs.remove("ha")
    seed = a.seed if a.seed is not None else (random.randrange(1, 1 << 31) if a.random else 1)
    engine.MAX_SHRINKS = env_int("MC_MODEL_MAX_SHRINKS", 200)
    bound_shrinking(engine, env_int("MC_MODEL_SHRINK_SECONDS", 60 if a.seconds < 600 else 300))
    phases = [Phase.explicit, Phase.generate] + ([] if a.no_shrink else [Phase.shrink])
    s = settings(max_examples=a.examples, stateful_step_count=a.steps, deadline=None,
                 database=None, derandomize=False, suppress_health_check=list(HealthCheck),
                 print_blob=True, phases=phases, report_multiple_bugs=False,
                 verbosity=Verbosity.debug if os.environ.get("MC_MODEL_VERBOSE") else Verbosity.normal)
    repro = os.environ.get("MC_MODEL_REPRODUCE", "")

    t0 = time.time()
    rounds, failed = 0, []
    print(f"model: hypothesis {hypothesis.__version__}, configurations {configs}, faults "
          f"{','.join(faults) or 'none'}, {a.examples} examples x {a.steps} steps per round, "
          f"about {a.seconds:.0f} s, first seed {seed}", flush=True)
    while True:
        for config in configs:
            cls = machine.make_machine(config, faults)

            def factory(cls=cls):
                return cls()

            factory._hypothesis_internal_use_seed = seed
            if repro:
                blob = repro.strip().removeprefix("b").strip("'\"")
                factory._hypothesis_internal_use_reproduce_failure = (
                    hypothesis.__version__, blob.encode())
            used = ",".join(sorted(cls.FAULTS)) or "none"
            replay = (f"tests/model/run.py --config {config} --faults {used} --seed {seed} "
                      f"--examples {a.examples} --steps {a.steps} --min-steps {a.min_steps} --rounds 1")
            r0 = time.time()
            print(f"model: round {rounds + 1}: {config} seed {seed} faults {used}", flush=True)
            try:
                run_machine(factory, s, min(a.steps, a.min_steps))
            except BaseException as e:  # noqa: BLE001 - every failure is reported
                if isinstance(e, KeyboardInterrupt):
                    raise
                failed.append((config, seed))
                print(f"model: FAILED {config} seed {seed} after {time.time() - r0:.1f} s: "
                      f"{type(e).__name__}: {e}", flush=True)
                traceback.print_exc(limit=3)
                print(f"model: replay: {replay}\n"
                      f"  (or MC_MODEL_SEED={seed} MC_MODEL_CONFIG={config} "
                      f"MC_MODEL_FAULTS={used} make soak SECONDS=1; add "
                      f"MC_MODEL_REPRODUCE=<blob of @reproduce_failure above> for the "
                      f"shortest sequence)", flush=True)
            else:
                print(f"model: round {rounds + 1} passed in {time.time() - r0:.1f} s", flush=True)
            rounds += 1
            seed += 1
        if failed or (a.rounds and rounds >= a.rounds) or time.time() - t0 >= a.seconds:
            break
    print(f"model: {rounds} rounds in {time.time() - t0:.0f} s, "
          f"{'FAILED: ' + ', '.join(f'{c} seed {s}' for c, s in failed) if failed else 'all passed'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
