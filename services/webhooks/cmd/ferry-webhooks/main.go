// Command ferry-webhooks runs Ferry's webhooks service alone.
package main

import (
	"github.com/ferryhq/ferry/platform/service"
	webhooks "github.com/ferryhq/ferry/services/webhooks"
)

func main() { service.Main("webhooks", webhooks.Needs, webhooks.Build) }
