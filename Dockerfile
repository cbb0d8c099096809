# projectmcp container images. One build stage, two runtimes:
#
#   static (the default target): the binary alone on distroless/static, for projects whose
#           servers are all remote (streamable HTTP or SSE). No shell, no package manager.
#   node:   the same binary on Debian slim with Node.js, npm and npx, for stdio servers
#           started with `npx`.
#
#   make docker-build        # IMAGE:TAG       (static)
#   make docker-build-node   # IMAGE:TAG-node  (node)
#
# Both run as uid/gid 65532 with HOME=/home/nonroot and start `projectmcp controller` unless
# given other arguments. The manifests (config/manager) and the chart (charts/projectmcp) rely
# on that: they set runAsUser 65532, pass only args (no command), keep the root filesystem
# read-only and mount emptyDirs on HOME and /tmp, where npx keeps its cache.
#
# Another runtime for stdio servers (Python's uvx, a JVM, a compiled server) is one more stage
# built FROM node (or from a slim base, copying the binary as below); see docs/install.md,
# "Container images".

ARG GO_VERSION=1.26
ARG NODE_VERSION=24

# The binary: compiled exactly as `make build` compiles it (test/deploy checks that the two
# commands agree), statically, so that it runs on any base image.
FROM golang:${GO_VERSION}-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -buildvcs=auto -o /out/projectmcp ./cmd/projectmcp

# Node.js for `npx` servers. The user is created with a home so that npm has somewhere to
# write when HOME is not a mounted volume (docker run without one).
FROM node:${NODE_VERSION}-bookworm-slim AS node
RUN groupadd --gid 65532 nonroot \
 && useradd --uid 65532 --gid 65532 --home-dir /home/nonroot --create-home --shell /usr/sbin/nologin nonroot
COPY --from=build /out/projectmcp /usr/local/bin/projectmcp
ENV HOME=/home/nonroot
WORKDIR /home/nonroot
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/projectmcp"]
CMD ["controller"]

# HTTP servers only; last, so that a plain `docker build .` makes this one.
FROM gcr.io/distroless/static-debian12:nonroot AS static
COPY --from=build /out/projectmcp /usr/local/bin/projectmcp
ENV HOME=/home/nonroot
WORKDIR /home/nonroot
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/projectmcp"]
CMD ["controller"]
