// Package access decides who may do what at the gateway: authentication (local mode's
// LocalRule: loopback callers of the controller's own user; KubernetesAuth's TokenReview and SubjectAccessReview for the verb use),
// RBAC items (a project's tools, prompts and resources granted per identity, with the review
// cache), and the Identity a request is served as, carried in its context. It imports neither
// the gateway's endpoint nor its request path: they ask it, and it never calls back.
package access
