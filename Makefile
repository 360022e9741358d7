# Everyday commands. CI runs .ci/run, which installs what the tests need and runs `go test ./...`
# (the README's test command) and the lint below.

.PHONY: test test-short lint bench

# The whole suite: needs redis-server and clang-16 on PATH (.ci/run installs them).
test:
	go test ./...

# A newcomer's loop: the fast tests of every package, without the end-to-end, fault and
# parity runs that -short skips (56 s on an idle 2-core machine).
test-short:
	go test -short ./...

# gofmt, go vet and staticcheck on linux/amd64 and darwin/arm64 (scripts/lint).
lint:
	scripts/lint

# Kernel and engine benchmarks; redlite bench compares with llama-bench (docs/benchmarks.md).
bench:
	go test -run '^$$' -bench . -benchmem ./engine/quant ./engine/cpu ./engine
