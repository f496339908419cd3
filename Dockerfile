# syntax=docker/dockerfile:1
# The controller's image, for people with a container engine. hack/build-image.sh builds
# the same binary, user and entrypoint without one (see hack/image): keep the two in step.

# The build runs on the builder's own platform and cross-compiles, which is much faster
# than emulating the target when building for several architectures.
FROM --platform=$BUILDPLATFORM golang:1.27.3 AS build
ARG TARGETOS=linux
ARG TARGETARCH
# What --version and sample_controller_build_info report: docker build --build-arg
# VERSION=$(hack/version.sh) --build-arg REVISION=$(git rev-parse HEAD).
ARG VERSION=(devel)
ARG REVISION=unknown
WORKDIR /src
# Modules in a layer of their own, so that a change to the source does not download them
# again.
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# The one build (hack/build.sh): static, because the final image has no libc;
# -trimpath and no symbols keep the binary the same wherever it is built.
RUN --mount=type=cache,target=/root/.cache/go-build \
    GOOS=${TARGETOS} GOARCH=${TARGETARCH} VERSION=${VERSION} REVISION=${REVISION} \
    hack/build.sh /sample-controller

FROM gcr.io/distroless/static:nonroot
ARG VERSION=(devel)
ARG REVISION=unknown
LABEL org.opencontainers.image.title="sample-controller" \
      org.opencontainers.image.description="Keeps a Deployment for every Foo (samplecontroller.k8s.io/v1alpha1) and reports its progress in the Foo's status." \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.source="https://github.com/seed-e6610ed6/sample-controller" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}"
COPY --from=build /sample-controller /sample-controller
# Numeric, so that the kubelet can enforce runAsNonRoot without reading /etc/passwd.
USER 65532:65532
ENTRYPOINT ["/sample-controller"]
