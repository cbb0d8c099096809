//go:build tools

// Package tools is the module of the tools `make test-deploy` uses, kept out of the main
// go.mod: helm (renders and lints charts/projectmcp) and controller-gen with
// prometheus-operator's API types, from which the test generates the ServiceMonitor CRD it
// installs in the API server. This file only keeps those types in go.mod.
package tools

import _ "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
