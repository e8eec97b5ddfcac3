package main

import (
	"testing"

	"github.com/ratekit/ratekit/examples/internal/httpexample"
)

func TestHello(t *testing.T) { httpexample.Test(t, "echo", newHandler) }
