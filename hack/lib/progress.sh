# Progress for long setup steps (sourced by hack/*.sh): on a cold machine setup runs for ten minutes,
# and a terminal that stays silent that long looks hung (issue 19).
#   run_with_heartbeat LABEL LOG CMD...  run CMD with its output appended to LOG; every
#       $TIDE_HEARTBEAT_SECONDS (default 20) while it runs, print "  ... LABEL <elapsed>s: <LOG's last line>";
#       returns CMD's exit status.
#   elapsed_s                            seconds since the sourcing script started ($SECONDS), e.g. "42s".

elapsed_s() { echo "${SECONDS}s"; }

last_log_line() {  # the last line of a log as a terminal shows it: after the last \r (progress bars), cut short
  local line
  line=$(tail -n 1 "$1" 2>/dev/null | tr -d '\000' || true)
  line=${line##*$'\r'}
  echo "${line:0:160}"
}

run_with_heartbeat() {
  local label=$1 log=$2 every=${TIDE_HEARTBEAT_SECONDS:-20}
  shift 2
  local t0=$SECONDS pid ticker rc=0
  "$@" >>"$log" 2>&1 &
  pid=$!
  # The ticker's sleep gets no stdout: once killed, it must not hold open a pipe its reader waits on.
  ( while sleep "$every" </dev/null >/dev/null 2>&1; do
      echo "  ... $label $((SECONDS - t0))s: $(last_log_line "$log")"
    done ) &
  ticker=$!
  wait "$pid" || rc=$?
  kill "$ticker" 2>/dev/null || true
  wait "$ticker" 2>/dev/null || true
  return "$rc"
}
