// Command ferry-dlq runs Ferry's dlq service alone.
package main

import (
	"github.com/ferryhq/ferry/platform/service"
	dlq "github.com/ferryhq/ferry/services/dlq"
)

func main() { service.Main("dlq", dlq.Needs, dlq.Build) }
