//! Every metric kforge's shipped sections name must exist on the H200 (gh100): checked against
//! the chip's `ncu --query-metrics` list, and, for launch attributes that list leaves out,
//! against a real export whose section did not ask for them (so ncu collects them always).

use std::io::Read as _;
use std::path::Path;

use kforge::ncu::sections::{SHIPPED_SECTIONS, parse_section};
use kforge::ncu::{MetricCatalog, parse_raw_csv};

fn fixtures() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/ncu")
}

fn gh100_catalog() -> MetricCatalog {
    let file = std::fs::File::open(fixtures().join("ncu-query-metrics-gh100.txt.gz")).unwrap();
    let mut text = String::new();
    flate2::read::GzDecoder::new(file)
        .read_to_string(&mut text)
        .unwrap();
    let catalog = MetricCatalog::from_query_metrics(&text);
    // The probe export asked for 7 metrics; every other column is collected for every launch.
    let probe = std::fs::read_to_string(fixtures().join("ncu-custom-raw.csv")).unwrap();
    let always: Vec<String> = parse_raw_csv(&probe).unwrap().kernels[0]
        .metrics
        .keys()
        .filter(|name| name.starts_with("launch__") || name.starts_with("sm__maximum_warps"))
        .cloned()
        .collect();
    catalog.with_always_collected(always)
}

#[test]
fn the_gh100_list_is_read_whole() {
    let catalog = gh100_catalog();
    // 3,650 base names: 3,389 counters, 205 ratios, 56 throughputs.
    assert_eq!(catalog.len(), 3650);
    assert!(catalog.check("dram__bytes_read.sum").is_ok());
    assert!(catalog.check("dram__bytes_read.sum.per_second").is_ok());
    assert!(catalog.check("gpu__time_duration.sum").is_ok());
    assert!(catalog.check("launch__registers_per_thread").is_ok());
    assert!(
        catalog
            .check("sm__inst_executed_pipe_fp32.avg.pct_of_peak_sustained_active")
            .is_err()
    );
    assert!(catalog.check("lts__t_sector_hit_rate.sum").is_err());
}

#[test]
fn every_shipped_metric_exists_on_gh100() {
    let catalog = gh100_catalog();
    for shipped in SHIPPED_SECTIONS {
        let section = parse_section(shipped.text, shipped.file_name).unwrap();
        assert!(!section.metrics.is_empty(), "{}", shipped.file_name);
        let problems: Vec<String> = section
            .metrics
            .iter()
            .filter_map(|m| catalog.check(&m.name).err())
            .map(|e| e.to_string())
            .collect();
        assert!(problems.is_empty(), "{}: {problems:#?}", shipped.file_name);
        let mut names: Vec<&str> = section.metrics.iter().map(|m| m.name.as_str()).collect();
        names.sort();
        let before = names.len();
        names.dedup();
        assert_eq!(
            before,
            names.len(),
            "{} lists a metric twice",
            shipped.file_name
        );
        assert!(
            section.metrics.iter().all(|m| m.label.is_some()),
            "{}: every metric needs a label for details exports",
            shipped.file_name
        );
    }
}

#[test]
fn the_repository_copies_are_the_embedded_ones() {
    for shipped in SHIPPED_SECTIONS {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("ncu-sections")
            .join(shipped.file_name);
        assert_eq!(std::fs::read_to_string(&path).unwrap(), shipped.text);
    }
}

#[test]
fn shipped_identifiers_do_not_shadow_ncus_own_sections() {
    // `ncu --list-sections` of ncu 2025.3.1: a table whose first column is the identifier.
    let listing = std::fs::read_to_string(fixtures().join("ncu-list-sections.txt")).unwrap();
    let stock: Vec<&str> = listing
        .lines()
        .filter(|l| !l.starts_with('-') && !l.starts_with("Identifier") && !l.trim().is_empty())
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert!(stock.contains(&"SpeedOfLight"), "{stock:?}");
    assert_eq!(stock.len(), 24);
    for shipped in SHIPPED_SECTIONS {
        let section = parse_section(shipped.text, shipped.file_name).unwrap();
        assert!(
            !stock.contains(&section.identifier.as_str()),
            "{}",
            section.identifier
        );
    }
}
