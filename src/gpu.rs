//! The facts about the GPUs in this machine, read through the CUDA driver (cudarc, loaded at run
//! time so kforge starts on machines without CUDA). "No GPU" is an ordinary answer here, never a
//! crash: the driver library is probed before any driver call, since cudarc panics without it.

use cudarc::driver::{result, sys};
use serde::{Deserialize, Serialize};

/// One GPU as the prompts, the evaluator and `kforge doctor` describe it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuInfo {
    pub index: u32,
    pub name: String,
    /// Compute capability, e.g. (9, 0).
    pub compute_capability: (u32, u32),
    pub sm_count: u32,
    pub memory_bytes: u64,
    pub l2_bytes: u64,
    /// Opt-in shared memory per block (what `cudaFuncSetAttribute` can raise a kernel to).
    pub max_shared_memory_per_block: u64,
    pub sm_clock_khz: u32,
    pub memory_clock_khz: u32,
    pub memory_bus_width_bits: u32,
}

impl GpuInfo {
    /// The nvcc architecture name, e.g. `sm_90`.
    pub fn arch(&self) -> String {
        format!(
            "sm_{}{}",
            self.compute_capability.0, self.compute_capability.1
        )
    }

    /// Theoretical DRAM bandwidth from clock and bus width (bytes/s; DDR, so ×2).
    pub fn theoretical_bandwidth(&self) -> f64 {
        2.0 * f64::from(self.memory_clock_khz) * 1e3 * f64::from(self.memory_bus_width_bits) / 8.0
    }
}

/// What the driver says about the machine as a whole.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DriverInfo {
    /// CUDA version the driver supports, e.g. "13.0".
    pub cuda_version: String,
    /// The kernel-module version, e.g. "580.159.04", where it can be read.
    pub driver_version: Option<String>,
}

#[derive(Debug, Clone, thiserror::Error, PartialEq)]
pub enum GpuError {
    #[error("no CUDA driver library (libcuda.so) on this machine")]
    NoDriver,
    #[error("the CUDA driver reports no GPU")]
    NoDevice,
    #[error("CUDA driver call {call} failed: {message}")]
    Driver { call: &'static str, message: String },
}

fn driver_error(call: &'static str, err: result::DriverError) -> GpuError {
    let message = err
        .error_string()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|_| format!("{:?}", err.0));
    if err.0 == sys::CUresult::CUDA_ERROR_NO_DEVICE {
        return GpuError::NoDevice;
    }
    GpuError::Driver { call, message }
}

/// Loads and initializes the driver, or says why it cannot.
pub fn init_driver() -> Result<(), GpuError> {
    // SAFETY: only tries to dlopen libcuda; no driver function is called.
    if !unsafe { sys::is_culib_present() } {
        return Err(GpuError::NoDriver);
    }
    result::init().map_err(|e| driver_error("cuInit", e))
}

/// The driver's CUDA version and the kernel module's version.
pub fn driver_info() -> Result<DriverInfo, GpuError> {
    init_driver()?;
    let mut version = 0;
    // SAFETY: the driver is loaded and initialized; the pointer is to a live local.
    unsafe { sys::cuDriverGetVersion(&mut version) }
        .result()
        .map_err(|e| driver_error("cuDriverGetVersion", e))?;
    Ok(DriverInfo {
        cuda_version: format!("{}.{}", version / 1000, (version % 1000) / 10),
        driver_version: kernel_module_version(),
    })
}

/// `/proc/driver/nvidia/version` holds "NVRM version: ... Kernel Module  580.159.04 ...".
fn kernel_module_version() -> Option<String> {
    let text = std::fs::read_to_string("/proc/driver/nvidia/version").ok()?;
    parse_kernel_module_version(&text)
}

fn parse_kernel_module_version(text: &str) -> Option<String> {
    let line = text.lines().find(|l| l.starts_with("NVRM version"))?;
    line.split_whitespace()
        .find(|w| w.chars().next().is_some_and(|c| c.is_ascii_digit()) && w.contains('.'))
        .map(str::to_string)
}

/// Every visible GPU.
pub fn list() -> Result<Vec<GpuInfo>, GpuError> {
    init_driver()?;
    let count = result::device::get_count().map_err(|e| driver_error("cuDeviceGetCount", e))?;
    if count <= 0 {
        return Err(GpuError::NoDevice);
    }
    (0..count).map(query).collect()
}

fn query(ordinal: i32) -> Result<GpuInfo, GpuError> {
    use sys::CUdevice_attribute as A;
    let dev = result::device::get(ordinal).map_err(|e| driver_error("cuDeviceGet", e))?;
    let attr = |a: A| -> Result<u32, GpuError> {
        // SAFETY: `dev` came from cuDeviceGet on an initialized driver.
        let v = unsafe { result::device::get_attribute(dev, a) }
            .map_err(|e| driver_error("cuDeviceGetAttribute", e))?;
        Ok(u32::try_from(v).unwrap_or(0))
    };
    let name = result::device::get_name(dev).map_err(|e| driver_error("cuDeviceGetName", e))?;
    // SAFETY: as above.
    let memory = unsafe { result::device::total_mem(dev) }
        .map_err(|e| driver_error("cuDeviceTotalMem", e))?;
    Ok(GpuInfo {
        index: ordinal as u32,
        name,
        compute_capability: (
            attr(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?,
            attr(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?,
        ),
        sm_count: attr(A::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?,
        memory_bytes: memory as u64,
        l2_bytes: u64::from(attr(A::CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE)?),
        max_shared_memory_per_block: u64::from(attr(
            A::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
        )?),
        sm_clock_khz: attr(A::CU_DEVICE_ATTRIBUTE_CLOCK_RATE)?,
        memory_clock_khz: attr(A::CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE)?,
        memory_bus_width_bits: attr(A::CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH)?,
    })
}

/// `GiB` with one decimal, `MiB` below 1 GiB.
pub fn human_bytes(bytes: u64) -> String {
    const GIB: f64 = 1024.0 * 1024.0 * 1024.0;
    const MIB: f64 = 1024.0 * 1024.0;
    let b = bytes as f64;
    if b >= GIB {
        format!("{:.1} GiB", b / GIB)
    } else {
        format!("{:.0} MiB", b / MIB)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_module_version_is_read_from_proc_text() {
        let text = "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build  (dvs-builder@U22)  Thu Oct  9 2025\nGCC version:  gcc version 12.3.0\n";
        assert_eq!(
            parse_kernel_module_version(text).as_deref(),
            Some("580.159.04")
        );
        assert_eq!(parse_kernel_module_version("garbage"), None);
    }

    #[test]
    fn arch_and_sizes() {
        let gpu = GpuInfo {
            index: 0,
            name: "NVIDIA H200".into(),
            compute_capability: (9, 0),
            sm_count: 132,
            memory_bytes: 150_000_000_000,
            l2_bytes: 60 * 1024 * 1024,
            max_shared_memory_per_block: 232_448,
            sm_clock_khz: 1_980_000,
            memory_clock_khz: 3_201_000,
            memory_bus_width_bits: 6144,
        };
        assert_eq!(gpu.arch(), "sm_90");
        assert_eq!(human_bytes(gpu.l2_bytes), "60 MiB");
        assert!((gpu.theoretical_bandwidth() / 1e12 - 4.92).abs() < 0.01);
    }

    #[test]
    fn no_gpu_is_an_answer_not_a_panic() {
        // On CI there is no libcuda; on the GPU host there is. Either way this returns.
        match list() {
            Ok(gpus) => assert!(!gpus.is_empty()),
            Err(e) => assert!(!e.to_string().is_empty()),
        }
    }
}
