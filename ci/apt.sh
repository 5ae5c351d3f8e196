# Sourced by the ci/*.sh scripts that need Debian packages: `apt_install PACKAGE...` installs
# them (apt-get update first; sudo when not root). The callers check what is missing, each
# by its own test (a command, a header), and pass only that.
apt_install() {
    local sudo=""
    [ "$(id -u)" -ne 0 ] && sudo=sudo
    $sudo apt-get update -q
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q "$@"
}
