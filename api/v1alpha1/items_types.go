package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Tools, prompts and resources exist in the API only as names for authorization: with
// spec.toolAuthorization: RBAC, a Role grants the verb `call` on tools.mcp.dsh.dev,
// prompts.mcp.dsh.dev or resources.mcp.dsh.dev with resourceNames such as
// "<project>/<server>__<tool>", and the gateway asks SubjectAccessReviews about them. Serving
// the three resources lets RBAC tooling find them: `kubectl auth can-i call
// tools.mcp.dsh.dev/shop/github__*` asks what the gateway asks. No object of these kinds can
// be created (each schema refuses every object); the tools are the servers', listed through
// the gateway.

// MCPTool is the authorization name of an MCP server's tool; it holds nothing.
// +kubebuilder:object:root=true
// +kubebuilder:resource:path=tools,singular=tool,scope=Namespaced
// +kubebuilder:validation:XValidation:rule="false",message="tools.mcp.dsh.dev names tools for RBAC rules only (spec.toolAuthorization: RBAC); it stores no objects"
type MCPTool struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
}

// MCPToolList is a list of MCPTools (always empty).
// +kubebuilder:object:root=true
type MCPToolList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []MCPTool `json:"items"`
}

// MCPPrompt is the authorization name of an MCP server's prompt; it holds nothing.
// +kubebuilder:object:root=true
// +kubebuilder:resource:path=prompts,singular=prompt,scope=Namespaced
// +kubebuilder:validation:XValidation:rule="false",message="prompts.mcp.dsh.dev names prompts for RBAC rules only (spec.toolAuthorization: RBAC); it stores no objects"
type MCPPrompt struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
}

// MCPPromptList is a list of MCPPrompts (always empty).
// +kubebuilder:object:root=true
type MCPPromptList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []MCPPrompt `json:"items"`
}

// MCPResource is the authorization name of an MCP server's resource; it holds nothing.
// +kubebuilder:object:root=true
// +kubebuilder:resource:path=resources,singular=resource,scope=Namespaced
// +kubebuilder:validation:XValidation:rule="false",message="resources.mcp.dsh.dev names resources for RBAC rules only (spec.toolAuthorization: RBAC); it stores no objects"
type MCPResource struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
}

// MCPResourceList is a list of MCPResources (always empty).
// +kubebuilder:object:root=true
type MCPResourceList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []MCPResource `json:"items"`
}

func init() {
	SchemeBuilder.Register(&MCPTool{}, &MCPToolList{}, &MCPPrompt{}, &MCPPromptList{}, &MCPResource{}, &MCPResourceList{})
}
