// Builds Prometheus's memcached exporter (a pinned release) for ci/server.sh, which checks that
// it reads floe-server as it reads memcached. Not part of floe: a test tool, like memcached-tool.
module floe.test/memcached-exporter

go 1.21

require github.com/prometheus/memcached_exporter v0.14.4
