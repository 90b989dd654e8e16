//! The configuration parser on arbitrary text: anything may be refused with an error naming the problem; nothing may
//! panic, and a configuration that parses serialises and parses again to the same value.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let Ok(cfg) = ragtune::Config::from_toml(&text) else { return };
    let written = toml_of(&cfg);
    let again = ragtune::Config::from_toml(&written)
        .unwrap_or_else(|e| panic!("a parsed config does not re-parse: {e}\n{written}"));
    assert_eq!(toml_of(&again), written, "a parsed config changes when written and read again");
});

/// The configuration as TOML, through its serde form (secrets are never written).
fn toml_of(cfg: &ragtune::Config) -> String {
    let value = serde_json::to_value(cfg).expect("a config serialises");
    json_to_toml(&value)
}

/// JSON to TOML by hand: only the fuzz target needs it, and `toml` is not a dependency here.
fn json_to_toml(value: &serde_json::Value) -> String {
    let mut out = String::new();
    write_table(&mut out, "", value);
    out
}

fn write_table(out: &mut String, prefix: &str, value: &serde_json::Value) {
    let Some(map) = value.as_object() else { return };
    for (k, v) in map {
        if !v.is_object() && !v.is_null() {
            out.push_str(&format!("{} = {}\n", serde_json::to_string(k).unwrap_or_default(), scalar(v)));
        }
    }
    for (k, v) in map {
        if v.is_object() {
            let name = if prefix.is_empty() {
                serde_json::to_string(k).unwrap_or_default()
            } else {
                format!("{prefix}.{}", serde_json::to_string(k).unwrap_or_default())
            };
            out.push_str(&format!("[{name}]\n"));
            write_table(out, &name, v);
        }
    }
}

fn scalar(v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::Array(items) => format!("[{}]", items.iter().map(scalar).collect::<Vec<_>>().join(", ")),
        serde_json::Value::Object(map) => format!(
            "{{ {} }}",
            map.iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| format!("{} = {}", serde_json::to_string(k).unwrap_or_default(), scalar(v)))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        other => other.to_string(),
    }
}
