# Sourced by the scripts that build Go programs (build-go-peer.sh, build-jaeger.sh,
# build-toxiproxy.sh): `find_go NAME MIN_VERSION` sets go_cmd to the Go toolchain
# ($GRPC_OVERHEAD_GO, else go on PATH, else /usr/local/go/bin/go), or exits 2 saying how
# to get one.
find_go() {
    go_cmd="${GRPC_OVERHEAD_GO:-}"
    if [[ -z "$go_cmd" ]]; then
        go_cmd="$(command -v go || true)"
        [[ -z "$go_cmd" && -x /usr/local/go/bin/go ]] && go_cmd=/usr/local/go/bin/go
    fi
    if [[ -z "$go_cmd" ]]; then
        echo "[$1] no Go toolchain: install Go ($2 or newer) or set GRPC_OVERHEAD_GO" >&2
        exit 2
    fi
}
