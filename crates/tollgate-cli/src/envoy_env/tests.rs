//! Upstream's variables read into tollgate's options, one behaviour per test.

use std::collections::HashMap;

use tollgate_server::Settings;

use super::*;
use crate::env_var::lookup;

fn read(vars: &[(&str, &str)]) -> Result<EnvoyEnv, EnvError> {
    EnvoyEnv::from_lookup(lookup(vars))
}

#[test]
fn nothing_set_asks_for_nothing() {
    assert_eq!(read(&[]).unwrap(), EnvoyEnv::default());
    assert_eq!(
        read(&[("PORT", ""), ("REDIS_URL", "")]).unwrap(),
        EnvoyEnv::default(),
        "empty is unset"
    );
}

#[test]
fn the_config_directory_is_root_subdirectory_and_app_directory() {
    let cases: [(&[(&str, &str)], &str); 3] = [
        (&[("RUNTIME_ROOT", "/data")], "/data/config"),
        (
            &[("RUNTIME_SUBDIRECTORY", "ratelimit")],
            "/srv/runtime_data/current/ratelimit/config",
        ),
        (
            &[
                ("RUNTIME_ROOT", "/r"),
                ("RUNTIME_SUBDIRECTORY", "s"),
                ("RUNTIME_APPDIRECTORY", "a"),
            ],
            "/r/s/a",
        ),
    ];
    for (vars, expected) in cases {
        assert_eq!(
            read(vars).unwrap().config,
            Some(PathBuf::from(expected)),
            "{vars:?}"
        );
    }
}

#[test]
fn redis_settings_become_one_store_url() {
    let cases: [(&[(&str, &str)], &str); 11] = [
        (
            &[
                ("REDIS_URL", "mymaster, s1:26379,s2:26379"),
                ("REDIS_TYPE", "sentinel"),
            ],
            "redis+sentinel://s1:26379,s2:26379/mymaster",
        ),
        (
            &[
                ("REDIS_URL", "mymaster,s1:26379"),
                ("REDIS_TYPE", "SENTINEL"),
                ("REDIS_AUTH", "app:p@ss"),
                ("REDIS_SENTINEL_AUTH", "s3nt/"),
            ],
            "redis+sentinel://app:p%40ss@s1:26379/mymaster?sentinel_auth=:s3nt%2F",
        ),
        (
            &[
                ("REDIS_URL", "mymaster,s1:26379"),
                ("REDIS_TYPE", "sentinel"),
                ("REDIS_TLS", "true"),
                ("REDIS_SENTINEL_AUTH", "watcher:pw"),
            ],
            "rediss+sentinel://s1:26379/mymaster?sentinel_auth=watcher:pw",
        ),
        (&[("REDIS_URL", "redis:6379")], "redis://redis:6379"),
        (
            &[
                ("REDIS_URL", "redis:6379"),
                ("REDIS_SOCKET_TYPE", "tcp"),
                ("REDIS_TLS", "true"),
            ],
            "rediss://redis:6379",
        ),
        (
            &[("REDIS_URL", "redis:6379"), ("REDIS_AUTH", "p@ss")],
            "redis://:p%40ss@redis:6379",
        ),
        (
            &[("REDIS_URL", "redis:6379"), ("REDIS_AUTH", "user:pa:ss")],
            "redis://user:pa%3Ass@redis:6379",
        ),
        (
            &[("REDIS_URL", "/var/run/redis.sock")],
            "unix:///var/run/redis.sock",
        ),
        (
            &[
                ("REDIS_URL", "a:7000, b:7001"),
                ("REDIS_TYPE", "CLUSTER"),
                ("REDIS_AUTH", "pw"),
            ],
            "redis+cluster://:pw@a:7000,b:7001",
        ),
        (
            &[
                ("REDIS_URL", "a:7000,b:7001"),
                ("REDIS_TYPE", "cluster"),
                ("REDIS_TLS", "true"),
            ],
            "rediss+cluster://a:7000,b:7001",
        ),
        (&[("REDIS_URL", "redis://already:1")], "redis://already:1"),
    ];
    for (vars, expected) in cases {
        assert_eq!(read(vars).unwrap().store.as_deref(), Some(expected), "{vars:?}");
    }
}

#[test]
fn listeners_take_upstreams_defaults_for_the_part_not_given() {
    let env = read(&[
        ("PORT", "9000"),
        ("GRPC_HOST", "127.0.0.1"),
        ("DEBUG_HOST", "127.0.0.1"),
    ])
    .unwrap();
    assert_eq!(env.http, Some("0.0.0.0:9000".parse().unwrap()));
    assert_eq!(env.grpc, Some("127.0.0.1:8081".parse().unwrap()));
    assert_eq!(env.debug, None, "the debug port is off unless DEBUG_PORT is set");
    let env = read(&[("DEBUG_PORT", "0"), ("HOST", "::1")]).unwrap();
    assert_eq!(env.debug, Some("0.0.0.0:0".parse().unwrap()));
    assert_eq!(env.http, Some("[::1]:8080".parse().unwrap()));
}

#[test]
fn switches_are_read_as_go_reads_booleans() {
    let env = read(&[
        ("SHADOW_MODE", "True"),
        ("QUOTA_MODE", "t"),
        ("MERGE_DOMAIN_CONFIG", "1"),
        ("NEAR_LIMIT_RATIO", "0.9"),
        ("RESPONSE_DYNAMIC_METADATA", "TRUE"),
        ("LIMIT_RESPONSE_HEADERS_ENABLED", "true"),
        ("LIMIT_RESET_HEADER", "X-RateLimit-Reset"),
        ("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", "true"),
    ])
    .unwrap();
    assert_eq!(
        env.compat,
        Compat {
            shadow_mode: true,
            quota_mode: true,
            merge_domain_config: true,
            stop_charges_when_over: true,
            near_limit_ratio: Some(0.9),
            response_dynamic_metadata: true,
            response_headers: Some(HeaderNames {
                limit: "RateLimit-Limit".into(),
                remaining: "RateLimit-Remaining".into(),
                reset: "X-RateLimit-Reset".into(),
            }),
        }
    );
    assert_eq!(
        read(&[("LIMIT_LIMIT_HEADER", "X-Limit")])
            .unwrap()
            .compat
            .response_headers,
        None,
        "names alone do not turn the headers on"
    );
}

#[test]
fn bad_values_name_the_variable() {
    let cases: [(&[(&str, &str)], &str); 16] = [
        (
            &[("PORT", "eighty")],
            "PORT=eighty: expected a port number (0 to 65535)",
        ),
        (
            &[("GRPC_PORT", "70000")],
            "GRPC_PORT=70000: expected a port number (0 to 65535)",
        ),
        (
            &[("HOST", "example.org"), ("PORT", "1")],
            "HOST=example.org: expected an IP address like 0.0.0.0 or ::",
        ),
        (
            &[("SHADOW_MODE", "yes")],
            "SHADOW_MODE=yes: expected true or false",
        ),
        (
            &[("NEAR_LIMIT_RATIO", "1.5")],
            "NEAR_LIMIT_RATIO=1.5: expected a number above 0 and at most 1, like 0.8",
        ),
        (
            &[("REDIS_URL", "a:1"), ("REDIS_TYPE", "sentinel")],
            "REDIS_URL=a:1: expected <master-name>,host:port[,host:port...] with REDIS_TYPE=sentinel",
        ),
        (
            &[("REDIS_URL", "mymaster"), ("REDIS_TYPE", "sentinel")],
            "REDIS_URL=mymaster: expected <master-name>,host:port[,host:port...] with REDIS_TYPE=sentinel",
        ),
        (
            &[("REDIS_URL", "a:1"), ("REDIS_TYPE", "replicated")],
            "REDIS_TYPE=replicated: expected single, cluster or sentinel",
        ),
        (
            &[("REDIS_URL", "a:1"), ("REDIS_TLS", "maybe")],
            "REDIS_TLS=maybe: expected true or false",
        ),
        (
            &[("REDIS_URL", "nohostport"), ("REDIS_SOCKET_TYPE", "tcp")],
            "REDIS_URL=nohostport: expected host:port",
        ),
        (
            &[("BACKEND_TYPE", "memcache")],
            "BACKEND_TYPE=memcache: only redis is supported",
        ),
        (
            &[("CONFIG_TYPE", "GRPC_XDS_DELTA")],
            "CONFIG_TYPE=GRPC_XDS_DELTA: expected FILE or GRPC_XDS_SOTW",
        ),
        (
            &[("LIMIT_LIMIT_HEADER", "X Limit")],
            "LIMIT_LIMIT_HEADER=X Limit: expected an HTTP header name",
        ),
        (
            &[("GRPC_SERVER_USE_TLS", "yes")],
            "GRPC_SERVER_USE_TLS=yes: expected true or false",
        ),
        (
            &[("GRPC_SERVER_USE_TLS", "true"), ("GRPC_SERVER_TLS_CERT", "/c")],
            "GRPC_SERVER_USE_TLS=true: needs GRPC_SERVER_TLS_CERT and GRPC_SERVER_TLS_KEY (PEM files of the certificate chain and its key)",
        ),
        (
            &[
                ("GRPC_SERVER_USE_TLS", "1"),
                ("GRPC_SERVER_TLS_CERT", "/c"),
                ("GRPC_SERVER_TLS_KEY", "/k"),
                ("GRPC_CLIENT_TLS_SAN", "envoy"),
            ],
            "GRPC_CLIENT_TLS_SAN=envoy: needs GRPC_CLIENT_TLS_CACERT: the name is checked on a client certificate that CA verified",
        ),
    ];
    for (vars, expected) in cases {
        assert_eq!(read(vars).unwrap_err().to_string(), expected, "{vars:?}");
    }
}

#[test]
fn grpc_tls_is_read_when_use_tls_is_on() {
    let base = [
        ("GRPC_SERVER_USE_TLS", "true"),
        ("GRPC_SERVER_TLS_CERT", "/certs/tls.crt"),
        ("GRPC_SERVER_TLS_KEY", "/certs/tls.key"),
    ];
    let tls = read(&base).unwrap().grpc_tls.expect("TLS on");
    assert_eq!(
        tls,
        GrpcTlsEnv {
            cert: "/certs/tls.crt".into(),
            key: "/certs/tls.key".into(),
            client_ca: None,
            client_san: None,
        }
    );
    // Envoy Gateway's name for the client CA, and upstream's, which wins when both are set.
    let gateway = [&base[..], &[("GRPC_SERVER_TLS_CA_CERT", "/certs/ca.crt")]].concat();
    assert_eq!(
        read(&gateway).unwrap().grpc_tls.unwrap().client_ca,
        Some(("GRPC_SERVER_TLS_CA_CERT", "/certs/ca.crt".into()))
    );
    let both = [
        &gateway[..],
        &[
            ("GRPC_CLIENT_TLS_CACERT", "/client/ca.crt"),
            ("GRPC_CLIENT_TLS_SAN", "envoy.example.com"),
        ],
    ]
    .concat();
    let tls = read(&both).unwrap().grpc_tls.unwrap();
    assert_eq!(
        tls.client_ca,
        Some(("GRPC_CLIENT_TLS_CACERT", "/client/ca.crt".into()))
    );
    assert_eq!(tls.client_san.as_deref(), Some("envoy.example.com"));
}

#[test]
fn grpc_tls_files_mean_nothing_while_use_tls_is_off() {
    let env = read(&[
        ("GRPC_SERVER_USE_TLS", "false"),
        ("GRPC_SERVER_TLS_CERT", "/certs/tls.crt"),
        ("GRPC_CLIENT_TLS_SAN", "envoy.example.com"),
    ])
    .unwrap();
    assert_eq!(env.grpc_tls, None);
}

#[test]
fn unknown_and_ignored_variables_change_nothing() {
    let env = read(&[
        ("USE_STATSD", "false"),
        ("LOG_LEVEL", "debug"),
        ("REDIS_POOL_SIZE", "lots"),
        ("SOMETHING", "x"),
    ])
    .unwrap();
    assert_eq!(env, EnvoyEnv::default());
}

#[test]
fn compat_turns_on_what_it_asks_for() {
    let mut settings = Settings::default();
    Compat {
        shadow_mode: true,
        merge_domain_config: true,
        ..Compat::default()
    }
    .apply(&mut settings);
    assert!(settings.envoy.global_shadow_mode && settings.load.merge_domains);
    assert!(settings.envoy.response_headers.is_none());
}

#[test]
fn lookup_reads_upstreams_variables() -> Result<(), Box<dyn std::error::Error>> {
    let vars = HashMap::from([
        ("RUNTIME_ROOT", "/data"),
        ("RUNTIME_SUBDIRECTORY", "ratelimit"),
        ("REDIS_SOCKET_TYPE", "tcp"),
        ("REDIS_URL", "redis.internal:6379"),
        ("REDIS_AUTH", "app:s3cret"),
        ("GRPC_PORT", "9081"),
    ]);
    let env = EnvoyEnv::from_lookup(|name| vars.get(name).map(|v| v.to_string()))?;
    assert_eq!(
        env.config.as_deref(),
        Some(std::path::Path::new("/data/ratelimit/config"))
    );
    assert_eq!(
        env.store.as_deref(),
        Some("redis://app:s3cret@redis.internal:6379")
    );
    assert_eq!(env.grpc, Some("0.0.0.0:9081".parse()?));
    assert_eq!(env.http, None, "neither HOST nor PORT: tollgate's own default");
    Ok(())
}

#[test]
fn log_levels_map_logrus_names() {
    assert_eq!(log_level("DEBUG"), Some("debug"));
    assert_eq!(log_level("fatal"), Some("error"));
    assert_eq!(log_level("loud"), None);
}
