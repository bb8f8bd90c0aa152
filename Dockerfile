# syntax=docker/dockerfile:1
# The tracer's image for docker and podman users: the same file system and
# entrypoint as `make image` (tools/imagebuild), which CI builds and tests
# without a container engine. tools/imagebuild's TestDockerfileMatchesImage
# keeps the two in step.
#
#   docker build -t ghcr.io/timeout-tracer/tracer:0.1.0 \
#     --build-arg VERSION=0.1.0 --build-arg COMMIT=$(git rev-parse HEAD) .
#
# `make image` is the reproducible one (same bytes for the same commit);
# this file gives the same layout but docker's own timestamps unless
# SOURCE_DATE_EPOCH is passed to BuildKit.

FROM docker.io/library/golang:1.26.8-bookworm AS build
ARG VERSION=dev
ARG COMMIT=
ARG TARGETARCH
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# Static (no libc in the image), paths trimmed, no VCS stamp: the commit
# comes from COMMIT.
RUN CGO_ENABLED=0 GOOS=linux GOARCH=${TARGETARCH} go build -trimpath -buildvcs=false \
      -ldflags "-s -w -X main.version=${VERSION} -X main.commit=${COMMIT}" \
      -o /rootfs/usr/local/bin/tracer ./cmd/tracer
# The rest of the file system, as tools/imagebuild/rootfs.go writes it:
# users root and nobody, Go's resolver order, Debian's Mozilla CA bundle
# (not /etc/ssl/certs, which may hold local CAs), a sticky /tmp.
RUN set -eu; cd /rootfs; mkdir -p etc/ssl/certs usr/share/doc/ca-certificates tmp; \
    printf 'root:x:0:0:root:/root:/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n' >etc/passwd; \
    printf 'root:x:0:\nnogroup:x:65534:\n' >etc/group; \
    printf 'hosts: files dns\n' >etc/nsswitch.conf; \
    for f in $(ls /usr/share/ca-certificates/mozilla/*.crt | LC_ALL=C sort); do cat "$f"; [ -z "$(tail -c1 "$f")" ] || echo; done >etc/ssl/certs/ca-certificates.crt; \
    cp /usr/share/doc/ca-certificates/copyright usr/share/doc/ca-certificates/; \
    chmod 0755 usr/local/bin/tracer; \
    find . -type d -exec chmod 0755 {} + ; chmod 1777 tmp; \
    find . -type f ! -path ./usr/local/bin/tracer -exec chmod 0644 {} +

FROM scratch
ARG VERSION=dev
ARG COMMIT=
COPY --from=build /rootfs/ /
# The DaemonSet's command ("tracer daemon ...") finds the binary through
# PATH. No USER: root, as the DaemonSet runs it (BPF; deploy/README.md).
ENV PATH=/usr/local/bin:/usr/bin:/bin
WORKDIR /
ENTRYPOINT ["/usr/local/bin/tracer"]
LABEL org.opencontainers.image.title="timeout-tracer" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${COMMIT}" \
      org.opencontainers.image.source="https://github.com/timeout-tracer/tracer"
