"""hypothesis.stateful.run_state_machine_as_test with a minimum number of
steps (newer hypothesis has `_min_steps`; Debian 12's 6.67 does not).

Why: every example here starts real processes, so a round runs only a few
examples, and hypothesis spends its first ten or so on tiny programs (one or
two steps) before it grows them. Forcing the first min_steps steps makes
every example a real program; shrinking still simplifies each step and drops
the ones past min_steps. The loop is hypothesis 6.67's, minus bundles'
result printing subtleties we do not use (no rule here has a target).
"""

import sys
import traceback

from hypothesis import given
from hypothesis import strategies as st
from hypothesis.control import current_build_context
from hypothesis.reporting import current_verbosity, report
from hypothesis.stateful import SHOULD_CONTINUE_LABEL, STATE_MACHINE_RUN_LABEL
from hypothesis import Verbosity


def run_machine(factory, settings, min_steps):
    """Runs factory() machines under settings; raises what the failing
    (shrunk) example raised, after hypothesis printed its steps. The first
    failure of the run is printed as it happens: when the example does not
    fail again (a race), hypothesis raises Flaky, which does not carry it."""
    first = []

    @settings
    @given(st.data())
    def run_state_machine(factory, data):
        cd = data.conjecture_data
        machine = factory()
        cd.hypothesis_runner = machine
        print_steps = current_build_context().is_final or current_verbosity() >= Verbosity.debug
        try:
            if print_steps:
                report(f"state = {machine.__class__.__name__}()")
            machine.check_invariants(settings)
            steps = 0
            while True:
                cd.start_example(STATE_MACHINE_RUN_LABEL)
                if steps < max(1, min_steps):
                    cd.draw_bits(16, forced=1)
                elif steps >= settings.stateful_step_count:
                    cd.draw_bits(16, forced=0)
                    break
                else:
                    cd.start_example(SHOULD_CONTINUE_LABEL)
                    more = cd.draw_bits(16)
                    if more > 1:
                        cd.stop_example(discard=True)
                        cd.draw_bits(16, forced=int(bool(more)))
                    else:
                        cd.stop_example()
                        if more == 0:
                            break
                steps += 1
                rule, args = cd.draw(machine._rules_strategy)
                if print_steps:
                    shown = {k: machine._pretty_print(v) for k, v in args.items()}
                try:
                    rule.function(machine, **dict(args))
                finally:
                    if print_steps:
                        machine._print_step(rule, shown, None)
                machine.check_invariants(settings)
                cd.stop_example()
        except Exception as e:
            if not first and not type(e).__module__.startswith("hypothesis"):
                first.append(1)
                print("model: the first failure of this round, as it happened (hypothesis "
                      "runs the example again):", file=sys.stderr, flush=True)
                traceback.print_exc(limit=6)
            raise
        finally:
            if print_steps:
                report("state.teardown()")
            machine.teardown()

    run_state_machine._hypothesis_internal_use_seed = getattr(
        factory, "_hypothesis_internal_use_seed", None)
    run_state_machine._hypothesis_internal_use_reproduce_failure = getattr(
        factory, "_hypothesis_internal_use_reproduce_failure", None)
    run_state_machine._hypothesis_internal_print_given_args = False
    run_state_machine(factory)
