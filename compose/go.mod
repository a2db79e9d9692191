module github.com/ferryhq/ferry/compose

go 1.26.8

require (
	github.com/ferryhq/ferry/platform v0.0.0
	gopkg.in/yaml.v3 v3.0.1
)

replace github.com/ferryhq/ferry/events/schema => ../events/schema

replace github.com/ferryhq/ferry/platform => ../platform
