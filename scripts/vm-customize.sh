#!/bin/sh
# mmdebstrap's customize hook for scripts/vm.sh: runs on the host with the guest's root as $1.
#   vm-customize.sh ROOT USER PUBKEY OUTDIR
set -eu
root=$1 user=$2 pub=$3 out=$4

echo bgtask-vm > "$root/etc/hostname"
printf '127.0.0.1 localhost\n127.0.1.1 bgtask-vm\n' > "$root/etc/hosts"
printf '/dev/vda / ext4 defaults,errors=remount-ro 0 1\n' > "$root/etc/fstab"

# A normal user whose manager runs without a login (lingering), as on a headless box, and who may sudo.
chroot "$root" useradd -m -u 1000 -U -s /bin/bash "$user"
mkdir -p "$root/var/lib/systemd/linger" && touch "$root/var/lib/systemd/linger/$user"
echo "$user ALL=(ALL) NOPASSWD:ALL" > "$root/etc/sudoers.d/bgtask-vm" && chmod 440 "$root/etc/sudoers.d/bgtask-vm"
for home in root "home/$user"; do
  install -d -m 700 "$root/$home/.ssh"
  install -m 600 "$pub" "$root/$home/.ssh/authorized_keys"
done
chroot "$root" chown -R "$user:$user" "/home/$user/.ssh"
printf 'PermitRootLogin prohibit-password\nUseDNS no\n' > "$root/etc/ssh/sshd_config.d/bgtask-vm.conf"

# The network (ssh comes in through qemu's user-mode forwarding), a persistent journal (bgtask output reads it).
printf '[Match]\nName=en*\n\n[Network]\nDHCP=yes\n' > "$root/etc/systemd/network/20-wired.network"
chroot "$root" systemctl enable systemd-networkd
mkdir -p "$root/var/log/journal"

# test_power: Debian's kernel does not build it (CONFIG_TEST_POWER unset), so it is built out of tree from the
# same kernel's source, into /lib/modules/KVER/updates; `modprobe test_power` gives test_ac, test_battery and
# test_usb, which send real power_supply uevents. The source is purged afterwards.
kver=$(ls "$root/lib/modules" | head -n 1)
src="$root/usr/src/test_power"
mkdir -p "$src"
tar -xJf "$root"/usr/src/linux-source-*.tar.xz -C "$src" --strip-components=4 --wildcards '*/drivers/power/supply/test_power.c'
echo 'obj-m := test_power.o' > "$src/Makefile"
chroot "$root" make -s -C "/usr/src/linux-headers-$kver" M=/usr/src/test_power modules
install -D -m 644 "$src/test_power.ko" "$root/lib/modules/$kver/updates/test_power.ko"
chroot "$root" depmod "$kver"
echo test_power > "$root/etc/modules-load.d/test_power.conf"
chroot "$root" env DEBIAN_FRONTEND=noninteractive apt-get purge -y -qq linux-source 'linux-source-*' > /dev/null
rm -rf "$src" "$root"/var/cache/apt/archives/*.deb

cp "$root"/boot/vmlinuz-* "$out/vmlinuz"
cp "$root"/boot/initrd.img-* "$out/initrd.img"
