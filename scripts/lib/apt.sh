# scripts/lib/apt.sh — sourced by the setup scripts: root-or-sudo detection and
# "install what is missing" for Debian packages, written once.
#   source scripts/lib/apt.sh
#   lockstep_sudo_setup NAME          # sets SUDO ("" as root, "sudo" otherwise)
#   lockstep_installed PACKAGE        # true when dpkg says it is installed
#   lockstep_apt_install NAME PKG...  # installs the missing ones (one apt-get update)

lockstep_sudo_setup() {
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1; then SUDO="sudo"; else
      echo "$1: not root and sudo is missing; run as root" >&2; exit 1; fi
  fi
}

lockstep_installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }

lockstep_apt_install() {
  local name="$1"; shift
  local missing=()
  for p in "$@"; do lockstep_installed "$p" || missing+=("$p"); done
  if [ "${#missing[@]}" -gt 0 ]; then
    echo "$name: installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    $SUDO apt-get update -qq
    $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
  else
    echo "$name: all packages present"
  fi
}
