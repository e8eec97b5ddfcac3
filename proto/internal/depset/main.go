// Command depset writes a FileDescriptorSet holding buf/validate/validate.proto
// and everything it imports, taken from the descriptors that the Go modules in
// go.mod register (the protovalidate generated package and
// google.golang.org/protobuf). scripts/gen-proto.sh feeds it to protoc with
// --descriptor_set_in, so code generation needs no schema registry and no
// hand-copied third-party .proto file: the imports are exactly the ones the
// pinned runtime validates against.
//
// Usage: go run ./proto/internal/depset OUT.binpb
package main

import (
	"fmt"
	"os"

	_ "buf.build/gen/go/bufbuild/protovalidate/protocolbuffers/go/buf/validate" // registers buf/validate/validate.proto
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
)

// roots are the imports of our .proto files that are not ours.
var roots = []string{"buf/validate/validate.proto"}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: depset OUT.binpb")
		os.Exit(2)
	}
	set, err := build(roots)
	if err == nil {
		var b []byte
		b, err = proto.MarshalOptions{Deterministic: true}.Marshal(set)
		if err == nil {
			err = os.WriteFile(os.Args[1], b, 0o644)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "depset:", err)
		os.Exit(1)
	}
}

// build returns the files named by paths and their transitive imports, each
// after its imports, as protoc expects.
func build(paths []string) (*descriptorpb.FileDescriptorSet, error) {
	set := &descriptorpb.FileDescriptorSet{}
	seen := map[string]bool{}
	var add func(fd protoreflect.FileDescriptor)
	add = func(fd protoreflect.FileDescriptor) {
		if seen[fd.Path()] {
			return
		}
		seen[fd.Path()] = true
		imports := fd.Imports()
		for i := 0; i < imports.Len(); i++ {
			add(imports.Get(i).FileDescriptor)
		}
		set.File = append(set.File, protodesc.ToFileDescriptorProto(fd))
	}
	for _, p := range paths {
		fd, err := protoregistry.GlobalFiles.FindFileByPath(p)
		if err != nil {
			return nil, fmt.Errorf("%s is not registered by any linked Go package: %w", p, err)
		}
		add(fd)
	}
	return set, nil
}
