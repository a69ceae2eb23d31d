//! The Envoy Gateway manifest of `envoy/envoy-gateway/`, checked without a
//! cluster against the EnvoyExtensionPolicy CRD (envoyproxy/gateway
//! charts/gateway-helm/charts/crds/crds/generated/gateway.envoyproxy.io_envoyextensionpolicies.yaml,
//! as of v1.9.0): it parses, has what the schema requires and only what it
//! knows, holds to its CEL rules, and its Wasm config is the demo
//! configuration and passes tollgate's parser.

use crate::support;

use serde_json::Value as Json;
use support::manifests::{is_dns1123, one_of, yaml_documents};
use support::{demo_plugin_config, repo_root};

fn policy() -> Json {
    let mut docs = yaml_documents(&repo_root().join("envoy/envoy-gateway/envoyextensionpolicy.yaml"));
    assert_eq!(docs.len(), 1, "one document");
    docs.remove(0)
}

/// `value`'s keys are among `known` (a structural CRD schema prunes others).
fn only(value: &Json, known: &[&str], what: &str) {
    for key in value.as_object().unwrap_or_else(|| panic!("{what}: not an object")).keys() {
        assert!(known.contains(&key.as_str()), "{what}.{key}: not in the CRD's schema");
    }
}

#[test]
fn extension_policy_has_what_its_crd_requires() {
    let p = policy();
    assert_eq!(p["apiVersion"], "gateway.envoyproxy.io/v1alpha1");
    assert_eq!(p["kind"], "EnvoyExtensionPolicy");
    assert!(is_dns1123(p["metadata"]["name"].as_str().unwrap_or("")), "metadata.name");
    let spec = &p["spec"];
    let fields = ["dynamicModule", "extProc", "lua", "mergeType", "targetRef", "targetRefs", "targetSelectors", "wasm"];
    only(spec, &fields, "spec");

    // CEL: "either targetRef or targetRefs must be used"; group and kind.
    assert!(spec.get("targetRef").is_none() && spec.get("targetSelectors").is_none(), "targetRefs only");
    let refs = spec["targetRefs"].as_array().expect("targetRefs");
    assert!(!refs.is_empty());
    for r in refs {
        only(r, &["group", "kind", "name", "sectionName"], "targetRefs[]");
        assert_eq!(r["group"], "gateway.networking.k8s.io", "targetRefs[].group");
        let kinds = ["Gateway", "ListenerSet", "HTTPRoute", "GRPCRoute", "UDPRoute", "TCPRoute", "TLSRoute"];
        one_of(&r["kind"], &kinds, "targetRefs[].kind");
        let name = r["name"].as_str().expect("targetRefs[].name is required");
        assert!((1..=253).contains(&name.len()), "targetRefs[].name length");
    }

    let wasm = spec["wasm"].as_array().expect("wasm");
    assert!((1..=16).contains(&wasm.len()), "wasm: maxItems 16");
    let w = &wasm[0];
    only(w, &["code", "config", "env", "failOpen", "name", "rootID"], "wasm[]");
    assert!(w["failOpen"].is_boolean(), "failOpen is a boolean");
    assert_eq!(w["rootID"], "tollgate", "the module's root context");
    assert!(w["name"].is_string(), "name is a string");
    let code = &w["code"];
    only(code, &["http", "image", "pullPolicy", "type"], "wasm[].code");
    // `type` is required, in both enums of its allOf: HTTP or Image.
    one_of(&code["type"], &["HTTP", "Image"], "code.type");
    // CEL: type Image needs image and forbids http.
    assert_eq!(code["type"], "Image", "the OCI image");
    assert!(code.get("http").is_none(), "code.http only with type HTTP");
    one_of(&code["pullPolicy"], &["IfNotPresent", "Always"], "code.pullPolicy");
    let image = &code["image"];
    only(image, &["pullSecretRef", "sha256", "tls", "url"], "code.image");
    let url = image["url"].as_str().expect("code.image.url is required");
    assert!(url.starts_with("oci://"), "{url}");
    let tag = url.rsplit_once(':').map(|(_, t)| t).unwrap();
    assert_eq!(tag, env!("CARGO_PKG_VERSION"), "the image tag is the crate version");
}

#[test]
fn extension_policy_config_is_the_demo_config_and_parses() {
    let config = &policy()["spec"]["wasm"][0]["config"];
    let demo: Json = serde_json::from_str(&demo_plugin_config()).unwrap();
    assert_eq!(config, &demo, "config differs from envoy/envoy.yaml's configuration");
    // Envoy Gateway passes config to the filter as a JSON string.
    let bytes = serde_json::to_vec(config).unwrap();
    if let Err(e) = tollgate::config::Config::from_json(&bytes) {
        panic!("tollgate rejects the config: {e}");
    }
}
