# Helpers the benchmark scripts share; sourced after they `cd` to the repo root.

# A loopback port nothing listens on (tried by connecting, at most 200 times).
free_port() {
    local port
    for _ in $(seq 1 200); do
        port=$((20000 + RANDOM % 30000))
        if ! (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
            echo "$port"
            return 0
        fi
    done
    echo "${0##*/}: no free port" >&2
    return 1
}
