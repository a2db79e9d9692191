module github.com/ferryhq/ferry/client

go 1.23
