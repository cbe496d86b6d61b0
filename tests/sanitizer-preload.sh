# Sourced by the test scripts (tests/pipelines/*.sh, tests/install/*.sh).
# In a sanitizer build tests/meson.build sets JOBFLOW_SANITIZER_PRELOAD: the
# processes these scripts start that are not instrumented themselves but load
# instrumented code (gst-launch-1.0 and gst-inspect-1.0 with the plugin,
# python3 with the extension or PyGObject) need the sanitizer runtime first
# in their library list ("ASan runtime does not come first in initial library
# list" otherwise), so it is preloaded into everything the script runs.
# LeakSanitizer is off there: those processes (bash, grep, gst-launch-1.0,
# python3) are not ours and free nothing at exit; the instrumented test
# programs (unit and element tests) are where leaks are checked. Reports
# still stop the process (halt_on_error=1) and land in the files that
# scripts/test collects (log_path).
if [ -n "${JOBFLOW_SANITIZER_PRELOAD:-}" ]; then
  export LD_PRELOAD="$JOBFLOW_SANITIZER_PRELOAD${LD_PRELOAD:+:$LD_PRELOAD}"
  export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
fi
