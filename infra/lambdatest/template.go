package lambdatest

import (
	"fmt"
	"path"
	"sort"
	"strings"
)

// Spec is one function as the synthesized template defines it.
type Spec struct {
	// LogicalID is the AWS::Lambda::Function's logical id.
	LogicalID string
	Handler   string
	Runtime   string
	MemoryMB  int
	TimeoutS  int
	// Env are the Environment.Variables, values still as the template
	// writes them (strings or intrinsic functions).
	Env map[string]any
	// Role is the logical id of the function's execution role.
	Role string
	// Asset is the aws:asset:path metadata: the folder CDK packaged.
	Asset string
}

// Template is a parsed CloudFormation template.
type Template struct {
	Resources map[string]map[string]any
}

// NewTemplate wraps a template decoded from JSON.
func NewTemplate(raw map[string]any) *Template {
	t := &Template{Resources: map[string]map[string]any{}}
	res, _ := raw["Resources"].(map[string]any)
	for id, r := range res {
		if m, ok := r.(map[string]any); ok {
			t.Resources[id] = m
		}
	}
	return t
}

func properties(r map[string]any) map[string]any {
	p, _ := r["Properties"].(map[string]any)
	return p
}

// Function reads the function with the logical id.
func (t *Template) Function(id string) (Spec, error) {
	r := t.Resources[id]
	if r == nil || r["Type"] != "AWS::Lambda::Function" {
		return Spec{}, fmt.Errorf("%s is not an AWS::Lambda::Function of the template", id)
	}
	p := properties(r)
	s := Spec{LogicalID: id, Env: map[string]any{}}
	s.Handler, _ = p["Handler"].(string)
	s.Runtime, _ = p["Runtime"].(string)
	if n, ok := p["MemorySize"].(float64); ok {
		s.MemoryMB = int(n)
	}
	if n, ok := p["Timeout"].(float64); ok {
		s.TimeoutS = int(n)
	}
	if e, ok := p["Environment"].(map[string]any); ok {
		if v, ok := e["Variables"].(map[string]any); ok {
			s.Env = v
		}
	}
	s.Role = refID(p["Role"])
	if md, ok := r["Metadata"].(map[string]any); ok {
		s.Asset, _ = md["aws:asset:path"].(string)
	}
	if s.MemoryMB == 0 || s.TimeoutS == 0 {
		return s, fmt.Errorf("%s: template gives no MemorySize or Timeout", id)
	}
	return s, nil
}

// refID is the logical id a Ref or Fn::GetAtt names.
func refID(v any) string {
	m, _ := v.(map[string]any)
	if id, ok := m["Ref"].(string); ok {
		return id
	}
	if ga, ok := m["Fn::GetAtt"].([]any); ok && len(ga) > 0 {
		id, _ := ga[0].(string)
		return id
	}
	return ""
}

// Route is an HTTP API route: its key ("ANY /v1/keys/{proxy+}" or
// "$default") and the function it integrates.
type Route struct {
	Key      string
	Function string // logical id
}

// HTTPRoutes are the routes of the template's HTTP APIs, each resolved to
// its Lambda integration's function.
func (t *Template) HTTPRoutes() ([]Route, error) {
	var out []Route
	for id, r := range t.Resources {
		if r["Type"] != "AWS::ApiGatewayV2::Route" {
			continue
		}
		p := properties(r)
		api := t.Resources[refID(p["ApiId"])]
		if api == nil || properties(api)["ProtocolType"] != "HTTP" {
			continue
		}
		key, _ := p["RouteKey"].(string)
		target, err := t.resolveTarget(p["Target"])
		if err != nil {
			return nil, fmt.Errorf("route %s (%s): %w", id, key, err)
		}
		out = append(out, Route{Key: key, Function: target})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out, nil
}

// resolveTarget follows "integrations/<Ref integration>" to the function the
// integration's IntegrationUri names.
func (t *Template) resolveTarget(v any) (string, error) {
	j, ok := v.(map[string]any)["Fn::Join"].([]any)
	if !ok || len(j) != 2 {
		return "", fmt.Errorf("target %v is not integrations/<id>", v)
	}
	parts, _ := j[1].([]any)
	for _, part := range parts {
		integ := t.Resources[refID(part)]
		if integ == nil || integ["Type"] != "AWS::ApiGatewayV2::Integration" {
			continue
		}
		fn := refID(properties(integ)["IntegrationUri"])
		if fn == "" {
			return "", fmt.Errorf("integration %s has no function", refID(part))
		}
		return fn, nil
	}
	return "", fmt.Errorf("target %v names no integration", v)
}

// Grant is one Allow statement of a role's policies: the actions (possibly
// with wildcards) it allows.
type Grant struct {
	Sid     string
	Actions []string
}

// Granted are the Allow statements of every AWS::IAM::Policy attached to
// the role with the logical id.
func (t *Template) Granted(role string) []Grant {
	var out []Grant
	for _, r := range t.Resources {
		if r["Type"] != "AWS::IAM::Policy" {
			continue
		}
		p := properties(r)
		attached := false
		roles, _ := p["Roles"].([]any)
		for _, ro := range roles {
			if refID(ro) == role {
				attached = true
			}
		}
		if !attached {
			continue
		}
		doc, _ := p["PolicyDocument"].(map[string]any)
		stmts, _ := doc["Statement"].([]any)
		for _, s := range stmts {
			st, _ := s.(map[string]any)
			if st["Effect"] != "Allow" {
				continue
			}
			g := Grant{}
			g.Sid, _ = st["Sid"].(string)
			switch a := st["Action"].(type) {
			case string:
				g.Actions = []string{a}
			case []any:
				for _, x := range a {
					if s, ok := x.(string); ok {
						g.Actions = append(g.Actions, s)
					}
				}
			}
			out = append(out, g)
		}
	}
	return out
}

// Allows reports whether some grant allows the action (IAM's wildcards,
// case-insensitive as IAM action names are).
func Allows(grants []Grant, action string) bool {
	for _, g := range grants {
		for _, a := range g.Actions {
			if ok, _ := path.Match(strings.ToLower(a), strings.ToLower(action)); ok {
				return true
			}
		}
	}
	return false
}

// Locals are the local stand-ins of the stack's resources that intrinsic
// references resolve to.
type Locals struct {
	Region, Account string
	// ByType maps a resource type to what Ref gives for it
	// (AWS::DynamoDB::Table -> the local table name).
	Ref map[string]string
	// GetAtt maps "Type.Attribute" to its local value
	// ("AWS::S3::Bucket.RegionalDomainName" -> 127.0.0.1:port).
	GetAtt map[string]string
}

// Resolve evaluates a template value: a string, or Ref, Fn::GetAtt and
// Fn::Join over the stack's resources and pseudo parameters.
func (t *Template) Resolve(v any, l Locals) (string, error) {
	switch x := v.(type) {
	case string:
		return x, nil
	case float64:
		return fmt.Sprint(x), nil
	case map[string]any:
		if id, ok := x["Ref"].(string); ok {
			switch id {
			case "AWS::Region":
				return l.Region, nil
			case "AWS::AccountId":
				return l.Account, nil
			case "AWS::URLSuffix":
				return "amazonaws.com", nil
			case "AWS::Partition":
				return "aws", nil
			}
			r := t.Resources[id]
			if r == nil {
				return "", fmt.Errorf("Ref %s: no such resource", id)
			}
			typ, _ := r["Type"].(string)
			if val, ok := l.Ref[typ]; ok {
				return val, nil
			}
			return "", fmt.Errorf("Ref %s: no local stand-in for %s", id, typ)
		}
		if ga, ok := x["Fn::GetAtt"].([]any); ok && len(ga) == 2 {
			id, _ := ga[0].(string)
			attr, _ := ga[1].(string)
			r := t.Resources[id]
			if r == nil {
				return "", fmt.Errorf("Fn::GetAtt %s: no such resource", id)
			}
			typ, _ := r["Type"].(string)
			if val, ok := l.GetAtt[typ+"."+attr]; ok {
				return val, nil
			}
			return "", fmt.Errorf("Fn::GetAtt %s.%s: no local stand-in for %s.%s", id, attr, typ, attr)
		}
		if j, ok := x["Fn::Join"].([]any); ok && len(j) == 2 {
			sep, _ := j[0].(string)
			parts, _ := j[1].([]any)
			out := make([]string, len(parts))
			for i, p := range parts {
				s, err := t.Resolve(p, l)
				if err != nil {
					return "", err
				}
				out[i] = s
			}
			return strings.Join(out, sep), nil
		}
	}
	return "", fmt.Errorf("cannot resolve %v", v)
}
