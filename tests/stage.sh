#!/bin/sh
# stage.sh NAME COMMAND... - runs COMMAND, then prints how long it took as
# "stage NAME: Ns" (with "FAILED, exit N" when it failed) and, when
# MC_STAGE_LOG names a file, appends the same line there (.ci/run prints
# them all at the end). Exits with COMMAND's status.
name=$1
shift
t0=$(date +%s)
"$@"
rc=$?
line="stage $name: $(($(date +%s) - t0))s"
[ "$rc" -eq 0 ] || line="$line FAILED, exit $rc"
echo "$line"
[ -z "${MC_STAGE_LOG:-}" ] || echo "$line" >>"$MC_STAGE_LOG"
exit "$rc"
