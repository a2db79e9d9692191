// Command ferry-scheduler runs Ferry's scheduler service alone.
package main

import (
	"github.com/ferryhq/ferry/platform/service"
	"github.com/ferryhq/ferry/services/scheduler"
)

func main() { service.Main("scheduler", scheduler.Needs, scheduler.Build) }
