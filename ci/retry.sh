# Sourced by the ci/*.sh scripts that install what they run. `retry_once WHAT CMD...` runs an
# install step (apt, pip, rustup, cargo install: each reaches a registry or a mirror, which
# can drop a connection) and, if it fails, once more after a pause; if the second try fails
# too it says which step failed and returns its status, and the calling script stops there
# (`set -e`) rather than going on without the tool.
retry_once() {
    local what="$1"
    shift
    "$@" && return 0
    echo "ci: $what failed (status $?); retrying once in 15 s" >&2
    sleep 15
    local status=0
    "$@" || status=$?
    if [ "$status" -ne 0 ]; then
        echo "ci: $what failed again (status $status): giving up" >&2
    fi
    return "$status"
}
