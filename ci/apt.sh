# Sourced by the ci/*.sh scripts that need Debian packages: `apt_install PACKAGE...` installs
# them (apt-get update first; sudo when not root). The callers check what is missing, each
# by its own test (a command, a header), and pass only that. Each step is tried twice
# (`retry.sh`).
source "$(dirname "${BASH_SOURCE[0]}")/retry.sh"
apt_install() {
    local sudo=""
    [ "$(id -u)" -ne 0 ] && sudo=sudo
    retry_once "apt-get update" $sudo apt-get update -q
    retry_once "apt-get install $*" \
        $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$@"
}
