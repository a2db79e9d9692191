// Command ferry-worker runs a Ferry worker with the built-in handlers.
package main

import (
	"github.com/ferryhq/ferry/platform/service"
	"github.com/ferryhq/ferry/services/worker"
)

func main() { service.Main("worker", worker.Needs, worker.Build) }
