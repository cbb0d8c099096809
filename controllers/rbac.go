// Package controllers holds the ProjectMCP reconciler.
package controllers

// The controller's permissions, generated into config/rbac/role.yaml by controller-gen: a
// ClusterRole for what lives in every namespace, and a Role in the controller's own namespace
// for the bucket Leases, which live there alone (a leaked token cannot forge a Lease elsewhere).
// The chart renders that Role in its release's namespace.
//
// +kubebuilder:rbac:groups=mcp.dsh.dev,resources=projectmcps,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=mcp.dsh.dev,resources=projectmcps/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=mcp.dsh.dev,resources=projectmcps/finalizers,verbs=update
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list;watch;update
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=authentication.k8s.io,resources=tokenreviews,verbs=create
// +kubebuilder:rbac:groups=authorization.k8s.io,resources=subjectaccessreviews,verbs=create
// +kubebuilder:rbac:groups=coordination.k8s.io,namespace=projectmcp-system,resources=leases,verbs=get;list;watch;create;update;patch;delete
