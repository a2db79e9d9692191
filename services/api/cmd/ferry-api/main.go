// Command ferry-api serves Ferry's job API and runs its status projection.
package main

import (
	"github.com/ferryhq/ferry/platform/service"
	"github.com/ferryhq/ferry/services/api"
)

func main() { service.Main("api", api.Needs, api.Build) }
