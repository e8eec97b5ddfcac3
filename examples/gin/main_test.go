package main

import (
	"testing"

	"github.com/gin-gonic/gin"

	"github.com/ratekit/ratekit/examples/internal/httpexample"
)

func TestHello(t *testing.T) {
	gin.SetMode(gin.TestMode)
	httpexample.Test(t, "gin", newHandler)
}
