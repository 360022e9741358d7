# syntax=docker/dockerfile:1
#
# Red Lite Batch worker image: redlited (the daemon), redlite (the CLI; its `dashboard`
# command is the asynqmon of docker-compose.yml) and redlite-api (the HTTP API). Linux, CPU backend. Models are never baked
# in: mount them read-only at /models. Docker cannot run where this file was written; see
# ops/README.md for what was checked instead (ops/ops_test.go builds the binaries exactly as
# the build stage does, from the context .dockerignore leaves).
#
# Images are pinned by exact version tag; ops/README.md says how to pin digests as well.

# --- build: the toolchain go.mod asks for (go 1.26) ---
FROM golang:1.26.8-bookworm AS build
WORKDIR /src
# Modules first, so that a source change does not download them again.
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# Static binaries: metalkit is a stub on Linux and nothing else needs cgo. --version and
# redlite_build_info report VERSION and COMMIT (docker build --build-arg COMMIT=$(git rev-parse HEAD)).
ARG VERSION=devel
ARG COMMIT=unknown
RUN CGO_ENABLED=0 go build -trimpath -buildvcs=false -ldflags="-s -w -X github.com/redlite/batch/internal/buildinfo.Version=${VERSION} -X github.com/redlite/batch/internal/buildinfo.Commit=${COMMIT}" -o /out/ ./cmd/redlited ./cmd/redlite ./cmd/redlite-api

# --- runtime: slim Debian, no toolchain, no sources ---
FROM debian:bookworm-20260824-slim
# ca-certificates for rediss:// and https webhooks; curl for the health check.
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates curl \
 && rm -rf /var/lib/apt/lists/*
# An unprivileged user with a fixed uid, so that volume ownership is predictable. Its cache
# directory holds the built-in default model when REDLITE_MODEL is unset.
RUN groupadd --system --gid 10001 redlite \
 && useradd --system --uid 10001 --gid redlite --home-dir /var/lib/redlite --create-home \
      --shell /usr/sbin/nologin redlite \
 && mkdir -p /var/cache/redlite /models \
 && chown redlite:redlite /var/cache/redlite
COPY --from=build /out/redlited /out/redlite /out/redlite-api /usr/local/bin/
ENV REDLITE_HTTP_ADDR=:9464 \
    REDLITE_CACHE_DIR=/var/cache/redlite \
    REDLITE_LOG_FORMAT=json
EXPOSE 9464
USER 10001:10001
# /healthz answers as soon as the process serves HTTP, before the model has loaded;
# /readyz (model loaded, Redis reachable) is for load balancers and people.
HEALTHCHECK --interval=15s --timeout=3s --start-period=60s --retries=3 \
  CMD curl -fsS -o /dev/null http://127.0.0.1:9464/healthz || exit 1
# redlited drains on SIGTERM: no new jobs, the running one gets REDLITE_SHUTDOWN_TIMEOUT to
# finish and is otherwise handed back to its queue. Give `docker stop -t` more than that.
STOPSIGNAL SIGTERM
CMD ["redlited"]
