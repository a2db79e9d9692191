// Command ferry-sse-bridge runs Ferry's sse-bridge service alone.
package main

import (
	"github.com/ferryhq/ferry/platform/service"
	ssebridge "github.com/ferryhq/ferry/services/sse-bridge"
)

func main() { service.Main("sse-bridge", ssebridge.Needs, ssebridge.Build) }
