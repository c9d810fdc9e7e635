//! Generic resources as jobs ask for them (`--gres`, DESIGN.md's
//! `gpu[:type]:N` and `emu:KIND[:GROUP]:N`), parsed into the counts and
//! kinds of a [`Shape`](crate::Shape); and which GPU devices an allocation
//! gets on its host.

use crate::pass::Shape;

/// Most GRES entries one job may list.
pub const GRES_ENTRIES_MAX: usize = 16;

/// Applies `gres` entries to `shape` (per host). Errors name the entry and
/// what was expected.
pub fn apply_gres(shape: &mut Shape, gres: &[String]) -> Result<(), String> {
    if gres.len() > GRES_ENTRIES_MAX {
        return Err(format!("at most {GRES_ENTRIES_MAX} --gres entries"));
    }
    for entry in gres {
        let parts: Vec<&str> = entry.split(':').collect();
        let count = |text: &str| -> Result<u32, String> {
            text.parse::<u32>()
                .ok()
                .filter(|&n| n > 0)
                .ok_or_else(|| format!("--gres {entry:?}: expected a count >= 1, not {text:?}"))
        };
        match parts.as_slice() {
            ["gpu", n] => shape.per_host.gpus = count(n)?,
            ["gpu", model, n] if !model.is_empty() => {
                shape.per_host.gpus = count(n)?;
                shape.gpu_type = (*model).to_string();
            }
            ["emu", kind, n] if !kind.is_empty() => {
                shape.per_host.emu = count(n)?;
                shape.emu_kind = (*kind).to_string();
            }
            ["emu", kind, group, n] if !kind.is_empty() && !group.is_empty() => {
                shape.per_host.emu = count(n)?;
                shape.emu_kind = (*kind).to_string();
                shape.emu_group = (*group).to_string();
            }
            _ => {
                return Err(format!(
                    "--gres {entry:?}: expected gpu:N, gpu:TYPE:N, emu:KIND:N or emu:KIND:GROUP:N"
                ))
            }
        }
    }
    Ok(())
}

/// The `want` lowest device positions of a host with `total` GPUs that no
/// allocation in `in_use` holds; `None` when too few are free.
pub fn pick_devices(total: u32, in_use: &[u32], want: u32) -> Option<Vec<u32>> {
    let picked: Vec<u32> = (0..total)
        .filter(|d| !in_use.contains(d))
        .take(want as usize)
        .collect();
    (picked.len() == want as usize).then_some(picked)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Resources;

    #[test]
    fn parses_gpu_and_emulator_requests() {
        let mut shape = Shape::one(Resources::cpu_mem(1, 0));
        apply_gres(
            &mut shape,
            &["gpu:a100:2".into(), "emu:zebu:rackA:1".into()],
        )
        .unwrap();
        assert_eq!(shape.per_host.gpus, 2);
        assert_eq!(shape.gpu_type, "a100");
        assert_eq!(
            (
                shape.per_host.emu,
                shape.emu_kind.as_str(),
                shape.emu_group.as_str()
            ),
            (1, "zebu", "rackA")
        );
        assert_eq!(
            apply_gres(&mut shape, &["gpu:0".into()]),
            Err("--gres \"gpu:0\": expected a count >= 1, not \"0\"".into())
        );
        assert!(apply_gres(&mut shape, &["fpga:1".into()])
            .unwrap_err()
            .contains("expected gpu:N"));
    }

    #[test]
    fn devices_are_the_lowest_free() {
        assert_eq!(pick_devices(4, &[0, 2], 2), Some(vec![1, 3]));
        assert_eq!(pick_devices(4, &[0, 2], 3), None);
    }
}
