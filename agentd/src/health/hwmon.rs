//! The node's temperature sensors from the kernel's hardware monitors
//! (`/sys/class/hwmon/hwmon*/`): world-readable, so the agent reads them without root or the
//! helper. Each chip names itself in `name`; each sensor is `temp<N>_input` in millidegrees,
//! with an optional `temp<N>_label` and `temp<N>_crit`. The files are the kernel's, but read as
//! data all the same: bounded in count and size, cleaned of control characters.

use std::io::Read;
use std::path::Path;

use bosun_proto::hardware::{MAX_NAME_LEN, MAX_SENSORS, Temperature};

/// Most chips looked at.
const MAX_CHIPS: usize = 32;
/// Highest sensor index looked at per chip.
const MAX_INDEX: u32 = 32;
/// Most bytes read from one file.
const MAX_FILE: u64 = 128;

/// Up to [`MAX_FILE`] bytes of `path` as trimmed text.
fn read_small(path: &Path) -> Option<String> {
    let mut text = String::new();
    std::fs::File::open(path)
        .ok()?
        .take(MAX_FILE)
        .read_to_string(&mut text)
        .ok()?;
    let text = super::smart::clean(text.trim());
    (!text.is_empty()).then_some(text)
}

/// Millidegrees in a file as °C, when plausible.
fn celsius(path: &Path) -> Option<f64> {
    let milli: i64 = read_small(path)?.parse().ok()?;
    // |milli| < 2^53: exact.
    #[allow(clippy::cast_precision_loss)]
    let c = milli as f64 / 1000.0;
    (-100.0..=1000.0).contains(&c).then_some(c)
}

/// Every sensor under `dir`, in a stable order; nothing when the directory is absent.
pub fn read(dir: &Path) -> Vec<Temperature> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut chips: Vec<std::path::PathBuf> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .take(MAX_CHIPS * 4)
        .collect();
    chips.sort();
    chips.truncate(MAX_CHIPS);
    let mut out = Vec::new();
    for chip in chips {
        let chip_name = read_small(&chip.join("name")).unwrap_or_else(|| "hwmon".to_owned());
        for i in 1..=MAX_INDEX {
            let Some(reading) = celsius(&chip.join(format!("temp{i}_input"))) else {
                continue;
            };
            let label = read_small(&chip.join(format!("temp{i}_label")))
                .unwrap_or_else(|| format!("temp{i}"));
            let mut sensor = format!("{chip_name}/{label}");
            if sensor.len() > MAX_NAME_LEN {
                sensor = sensor.chars().take(64).collect();
            }
            // Two chips of one driver (two NVMe drives) label their sensors alike: the
            // chip's directory tells them apart, so each sensor has its own name.
            if out.iter().any(|t: &Temperature| t.sensor == sensor) {
                let dir = chip
                    .file_name()
                    .map(|d| super::smart::clean(&d.to_string_lossy()))
                    .unwrap_or_default();
                sensor = format!("{} ({dir})", sensor.chars().take(40).collect::<String>());
            }
            out.push(Temperature {
                sensor,
                celsius: reading,
                crit: celsius(&chip.join(format!("temp{i}_crit"))),
                max: celsius(&chip.join(format!("temp{i}_max"))),
                judged: None,
            });
            if out.len() == MAX_SENSORS {
                return out;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sensors_are_read_bounded_and_cleaned() {
        let dir = tempfile::tempdir().unwrap();
        let chip = dir.path().join("hwmon0");
        std::fs::create_dir(&chip).unwrap();
        std::fs::write(chip.join("name"), "coretemp\n").unwrap();
        std::fs::write(chip.join("temp1_input"), "48000\n").unwrap();
        std::fs::write(chip.join("temp1_label"), "Package id 0\n").unwrap();
        std::fs::write(chip.join("temp1_crit"), "100000\n").unwrap();
        std::fs::write(chip.join("temp2_input"), "not a number").unwrap();
        std::fs::write(chip.join("temp3_input"), "9999999999").unwrap();
        let evil = dir.path().join("hwmon1");
        std::fs::create_dir(&evil).unwrap();
        std::fs::write(evil.join("name"), "\u{1b}[31mnvme").unwrap();
        std::fs::write(evil.join("temp1_input"), "-5000").unwrap();
        let twin = dir.path().join("hwmon2");
        std::fs::create_dir(&twin).unwrap();
        std::fs::write(twin.join("name"), "\u{1b}[31mnvme").unwrap();
        std::fs::write(twin.join("temp1_input"), "41000").unwrap();
        std::fs::write(twin.join("temp1_max"), "70000").unwrap();
        let read = read(dir.path());
        assert_eq!(read.len(), 3, "{read:?}");
        assert_eq!(
            read[2].sensor, " [31mnvme/temp1 (hwmon2)",
            "two chips alike"
        );
        assert_eq!((read[2].max, read[0].max), (Some(70.0), None));
        assert_eq!(read[0].sensor, "coretemp/Package id 0");
        assert_eq!((read[0].celsius, read[0].crit), (48.0, Some(100.0)));
        assert_eq!(read[1].sensor, " [31mnvme/temp1");
        assert_eq!(read[1].celsius, -5.0);
        assert!(super::read(&dir.path().join("absent")).is_empty());
    }
}
