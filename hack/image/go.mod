// The image tool of hack/build-image.sh: builds the controller's container image without
// a container engine. Kept out of the product module so that go-containerregistry never
// mixes with the controller's dependencies.
module github.com/seed-e6610ed6/sample-controller/hack/image

go 1.26.0

require github.com/google/go-containerregistry v0.22.1

require (
	github.com/google/go-cmp v0.7.0 // indirect
	github.com/klauspost/compress v1.19.2 // indirect
	github.com/opencontainers/go-digest v1.0.0 // indirect
	github.com/opencontainers/image-spec v1.1.1 // indirect
	golang.org/x/sync v0.22.0 // indirect
)
