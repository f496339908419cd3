package main

import (
	"bytes"
	"debug/elf"
	"fmt"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// goArch names the ELF machines the controller is built for the way image platforms do.
var goArch = map[elf.Machine]string{
	elf.EM_X86_64:  "amd64",
	elf.EM_AARCH64: "arm64",
}

// platformOf reports the platform a Linux executable runs on, read from its ELF header so
// that the image can never claim an architecture its binary does not have. It refuses a
// binary that asks for a program interpreter: the image holds no dynamic loader and no
// libc, so such a binary would fail to start with a bare "no such file or directory".
func platformOf(binary []byte) (v1.Platform, error) {
	f, err := elf.NewFile(bytes.NewReader(binary))
	if err != nil {
		return v1.Platform{}, fmt.Errorf("reading the binary as ELF: %w", err)
	}
	defer f.Close()

	if f.Type != elf.ET_EXEC && f.Type != elf.ET_DYN {
		return v1.Platform{}, fmt.Errorf("the binary is an ELF %s, not an executable", f.Type)
	}
	for _, prog := range f.Progs {
		if prog.Type != elf.PT_INTERP {
			continue
		}
		interp := make([]byte, prog.Filesz)
		if _, err := prog.ReadAt(interp, 0); err != nil {
			return v1.Platform{}, fmt.Errorf("reading the program interpreter: %w", err)
		}
		return v1.Platform{}, fmt.Errorf("the binary is dynamically linked (interpreter %s), but the image has no loader: build it with CGO_ENABLED=0",
			strings.TrimRight(string(interp), "\x00"))
	}
	arch, ok := goArch[f.Machine]
	if !ok {
		return v1.Platform{}, fmt.Errorf("the binary is for %s, which this image is not built for", f.Machine)
	}
	return v1.Platform{OS: "linux", Architecture: arch}, nil
}
