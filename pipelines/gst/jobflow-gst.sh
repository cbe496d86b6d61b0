# shellcheck shell=bash disable=SC2034,SC2154  # sets value/shift_by/build for, and uses prog of, the sourcing script
# Shared by train-lenet, eval-lenet and classify-video (sourced, not run):
# option helpers, the GStreamer environment for the plugin in a build tree,
# and reading fields out of the element messages `gst-launch-1.0 -m` prints.

gst_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export LC_ALL=C   # printf's %f and the messages' numbers use a '.'

die() { echo "$prog: $*" >&2; exit 1; }
usage_error() { echo "$prog: $* (try --help)" >&2; exit 2; }

# opt_value NAME "$@": the value of "--name VALUE" / "--name=VALUE" ($1 is
# the option as given); sets `shift_by` to how many words it took.
opt_value() {
  local name=$1 arg=$2
  if [[ $arg == "$name="* ]]; then
    value=${arg#"$name="}; shift_by=1
  elif (($# >= 3)); then
    value=$3; shift_by=2
  else
    usage_error "option $name needs a value"
  fi
}
need_count() {  # need_count OPTION VALUE [MIN]: a whole number >= MIN (default 0)
  [[ $2 =~ ^[0-9]+$ ]] && (($2 >= ${3:-0})) || usage_error "$1 needs a whole number >= ${3:-0}, got '$2'"
}

# The build tree: --build, else ./build, else the one next to this checkout.
find_build() {
  local want=$1
  if [[ -z $want ]]; then
    want=./build
    [[ -f $want/plugin/libgstjobflow.so ]] || want=$gst_dir/../../build
  fi
  [[ -f $want/plugin/libgstjobflow.so ]] ||
    die "no GStreamer plugin in '$want' (expected $want/plugin/libgstjobflow.so; build with: meson setup build && ninja -C build, or pass --build DIR)"
  build=$(cd "$want" && pwd)
}

# The plugin from the build tree and a registry of our own, so that neither
# the user's registry nor an installed jobflow plugin gets in the way.
setup_gst_env() {
  export GST_PLUGIN_PATH=$build/plugin${GST_PLUGIN_PATH:+:$GST_PLUGIN_PATH}
  export GST_REGISTRY=${JOBFLOW_GST_REGISTRY:-$build/pipelines/gst-registry.bin}
  command -v gst-launch-1.0 >/dev/null || die "gst-launch-1.0 not found (apt-get install gstreamer1.0-tools)"
  gst-inspect-1.0 jobflow >/dev/null 2>&1 && return
  # A registry written while the build was relinking the libraries remembers
  # the plugin as broken (until libgstjobflow.so itself changes): start afresh.
  rm -f "$GST_REGISTRY"
  gst-inspect-1.0 jobflow >/dev/null 2>&1 && return
  die "the jobflow plugin in $build/plugin does not load:
$(gst-inspect-1.0 "$build/plugin/libgstjobflow.so" 2>&1 | grep -v '^$' | head -5)"
}

# field NAME LINE: sets `value` to field NAME of the message structure in
# LINE as gst-launch -m prints it (`name=(type)value`, strings possibly
# "quoted" and \-escaped); returns 1 when the field is missing.
field() {
  local re="[ ,]$1=\\(([a-z0-9]+)\\)(\"([^\"\\\\]|\\\\.)*\"|[^,;]*)"
  [[ $2 =~ $re ]] || return 1
  value=${BASH_REMATCH[2]}
  if [[ $value == \"*\" ]]; then value=${value:1:${#value}-2}; fi
  # undo the \-escapes (\\ -> \, \  -> space, ...)
  if [[ $value == *\\* ]]; then value=$(printf '%s' "$value" | sed 's/\\\(.\)/\1/g'); fi
}
# is_message NAME LINE: LINE is an element message with structure NAME.
is_message() { [[ $2 == *"(element): $1, "* || $2 == *"(element): $1;"* ]]; }
