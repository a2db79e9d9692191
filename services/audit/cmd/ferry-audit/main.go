// Command ferry-audit runs Ferry's audit service alone.
package main

import (
	"github.com/ferryhq/ferry/platform/service"
	audit "github.com/ferryhq/ferry/services/audit"
)

func main() { service.Main("audit", audit.Needs, audit.Build) }
