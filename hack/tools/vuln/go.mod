// govulncheck, for `make vulncheck` (hack/vulncheck.sh, which pins the database it
// reads). It lives in its own module so that its dependencies never take part in the
// version resolution of the product or of the other tools. It needs newer
// golang.org/x/{mod,sync,sys,tools} than the product has, so unlike the other tools it
// does not share their compilation, and make test's module check leaves it out.
module github.com/seed-e6610ed6/sample-controller/hack/tools/vuln

go 1.26.0

tool golang.org/x/vuln/cmd/govulncheck

require (
	golang.org/x/mod v0.42.0 // indirect
	golang.org/x/sync v0.24.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
	golang.org/x/telemetry v0.0.0-20261010193011-f71dc92da45e // indirect
	golang.org/x/tools v0.52.0 // indirect
	golang.org/x/vuln v1.9.0 // indirect
)
