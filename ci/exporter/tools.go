//go:build tools

// The exporter's command, so that `go build` in this module builds it at the pinned version.
package tools

import _ "github.com/prometheus/memcached_exporter/cmd/memcached_exporter"
