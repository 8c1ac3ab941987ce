# Shared by scripts/setup.sh, scripts/fuzz.sh and .ci/run (sourced, not run): apt_install and
# find_nvcc. Takes no time of its own.

# apt_install PACKAGE...: install Debian packages when apt-get is there (with sudo when not root);
# returns non-zero when it is not there or the install fails (e.g. no network).
apt_install() {
  command -v apt-get >/dev/null 2>&1 || return 1
  local sudo=""
  [ "$(id -u)" -ne 0 ] && sudo=sudo
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq &&
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@"
}

# find_nvcc: put the CUDA toolkit's nvcc on the PATH if it is installed but not there.
find_nvcc() {
  command -v nvcc >/dev/null 2>&1 && return 0
  local d
  for d in /usr/local/cuda/bin /usr/local/cuda-13.0/bin; do
    [ -x "$d/nvcc" ] && export PATH="$d:$PATH" && return 0
  done
  return 1
}
